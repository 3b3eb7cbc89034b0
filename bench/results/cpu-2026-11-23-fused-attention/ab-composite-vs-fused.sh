#!/usr/bin/env bash
# A/B: composite vs fused attention, alternating, release binary given as $1.
BIN=$1; ROUNDS=${ROUNDS:-3}
for cfg in default 6l384; do
  if [[ $cfg == default ]]; then F=""; S=103; else F="--n-layer 6 --n-head 6 --n-embd 384 --block-size 256 --seq-len 256 --batch-size 8"; S=15; fi
  for r in $(seq $ROUNDS); do
    for mode in composite fused; do
      extra=""; [[ $mode == fused ]] && extra="--fused-attention"
      out=/tmp/ab/run-$cfg-$mode-$r
      $BIN train $F $extra --steps 800 --stop-after $S --quiet --force --out $out > $out.log 2>&1
      # tokens/s over steps after the first 3, from metrics.csv
      python3 - "$out/metrics.csv" "$cfg" "$mode" <<'PY'
import csv,sys,statistics
rows=list(csv.DictReader(open(sys.argv[1])))
tps=[float(r['tokens_per_s']) for r in rows[3:] if r['tokens_per_s']]
print(f"{sys.argv[2]:8} {sys.argv[3]:10} median tokens/s {statistics.median(tps):8.0f}  final loss {rows[-1]['loss']}")
PY
    done
  done
done
