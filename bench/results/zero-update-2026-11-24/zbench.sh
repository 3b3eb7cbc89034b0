#!/bin/bash
# ZeRO optimizer-span timing, old (per-segment uploads) vs new (AdamW ranges), alternating.
for round in 1 2 3; do
  for z in 1 2 3; do
    for v in old new; do
      rm -rf /tmp/zb-$v
      /tmp/brrr-$v train --dp 2 --zero $z --steps 40 --out /tmp/zb-$v --trace /tmp/zb-$v.json > /dev/null 2>&1 || echo FAIL
      python3 -c "
import json,statistics
t=json.load(open('/tmp/zb-$v.json')); ev=t['traceEvents'] if isinstance(t,dict) else t
d=sorted(e['dur'] for e in ev if e.get('name')=='optimizer' and 'dur' in e)[5:]
s=sorted(e['dur'] for e in ev if e.get('name')=='step' and 'dur' in e)[5:]
print('$round', $z, '$v', round(statistics.median(d)/1000,2), round(statistics.median(s)/1000,2) if s else '-')
"
    done
  done
done
