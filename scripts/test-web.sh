#!/usr/bin/env bash
# The browser app's tests: run its logic tests natively and in headless Chromium
# (wasm-bindgen-test, with the conformance suite on WebGPU and a training run), build it
# (scripts/build-web.sh, release), then serve the built app on 127.0.0.1 and drive
# every page end to end (web/e2e/e2e.cjs): operate a control, check the number it shows
# against a formula computed in the test, screenshot each page into
# target/web-screenshots/, fail on any console error. Prints the gzip-compressed size of
# what a page load fetches, time to interactive and the training demo's tokens/s.
#
#   scripts/test-web.sh            # everything (e2e in quick mode)
#   scripts/test-web.sh --full     # e2e with the full kernel sizes and longer training
#
# Installs what is missing, and only that (a second run costs seconds), under
# $BRRR_TOOLS_DIR (default ~/.cache/brrr-tools):
#   - apt: chromium chromium-driver (never a downloaded browser)
#   - rustup target wasm32-unknown-unknown
#   - wasm-bindgen-cli at Cargo.lock's wasm-bindgen version (cargo install)
#   - npm: puppeteer-core and binaryen (wasm-opt 132) into $BRRR_TOOLS_DIR/node-web
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
FULL=""
if [ "${1:-}" = "--full" ]; then FULL="--full"; fi

BRRR_ROOT="$ROOT"
# shellcheck source=scripts/tools.sh
source "$ROOT/scripts/tools.sh"
NODE_DIR="$BRRR_NODE_DIR"
export DEBIAN_FRONTEND=noninteractive

T0=$SECONDS
step() { printf '\n==> [%4ds] %s\n' "$((SECONDS - T0))" "$*"; }
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

# ---- system packages ---------------------------------------------------------------
chromium_bin() { command -v chromium || command -v chromium-browser || true; }
missing=()
[ -n "$(chromium_bin)" ] || missing+=(chromium)
command -v chromedriver > /dev/null || missing+=(chromium-driver)
command -v node > /dev/null || missing+=(nodejs npm)
if [ ${#missing[@]} -gt 0 ]; then
    step "installing ${missing[*]}"
    $SUDO apt-get -o DPkg::Lock::Timeout=600 update -q < /dev/null
    $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}" < /dev/null
fi
CHROME="$(chromium_bin)"
export CHROME

# ---- Rust and node tools (scripts/tools.sh: each installed once, under a lock) ----------
step "tools (installed once into $BRRR_TOOLS)"
ensure_wasm_target
ensure_wasm_bindgen
ensure_node_web
WBG_VERSION="$(wasm_bindgen_version)"
step "tools: wasm-bindgen $WBG_VERSION, $(wasm-opt --version), chromium $("$CHROME" --version 2> /dev/null | awk '{print $2}')"

# ---- lint and unit tests ---------------------------------------------------------------
step "cargo clippy -p brrr-web --target wasm32-unknown-unknown --all-targets -- -D warnings"
cargo clippy -q -p brrr-web --target wasm32-unknown-unknown --all-targets -- -D warnings < /dev/null
# The page logic natively: `cargo test --workspace` covers it already when
# scripts/test.sh runs this script (it sets BRRR_WORKSPACE_TESTED=1).
if [ "${BRRR_WORKSPACE_TESTED:-}" != 1 ]; then
    step "cargo test -p brrr-web (the page logic, natively)"
    cargo test -q -p brrr-web < /dev/null
fi

export CHROMEDRIVER="$(command -v chromedriver)"
WEBDRIVER_JSON="$ROOT/web/webdriver.json"
if [ "$CHROME" != /usr/bin/chromium ]; then
    WEBDRIVER_JSON="$(mktemp -t brrr-webdriver.XXXXXX.json)"
    sed "s#/usr/bin/chromium#$CHROME#" "$ROOT/web/webdriver.json" > "$WEBDRIVER_JSON"
fi
export WASM_BINDGEN_TEST_WEBDRIVER_JSON="$WEBDRIVER_JSON"
export WASM_BINDGEN_TEST_TIMEOUT="${WASM_BINDGEN_TEST_TIMEOUT:-900}"
# Every wasm32 test binary in one cargo invocation, so that their common dependencies
# (wgpu, the brrr crates) are compiled for wasm32 once, with one feature set: the app's
# page tests, the conformance suite on the browser's WebGPU, and a GPT training in the
# tab. This build is also the check that the portable crates compile for wasm32.
# Built with the release profile and scripts/build-web.sh's setting (no line tables), so
# that the app's release build below reuses every dependency and workspace crate
# compiled here (the feature sets are the same) instead of compiling the tree again.
step "wasm32 tests in headless Chromium (release): brrr-web, brrr-conformance (WebGPU), brrr-train"
# No -q: cargo would pass --quiet to wasm-bindgen-test-runner, which rejects it.
CARGO_PROFILE_RELEASE_DEBUG=false \
    cargo test --release --target wasm32-unknown-unknown -p brrr-web -p brrr-conformance \
    -p brrr-train --test web -- --nocapture < /dev/null

# ---- build ------------------------------------------------------------------------------
step "scripts/build-web.sh (release build into web/dist)"
bash scripts/build-web.sh < /dev/null
DIST="$ROOT/web/dist"

# What the first page load fetches: index.html, the JS glue, the wasm and the CSS (the
# corpus is fetched only by the training page, the scalar build only by a browser
# without wasm SIMD).
python3 - "$DIST" << 'PY'
import gzip, pathlib, sys
dist = pathlib.Path(sys.argv[1])
total = 0
for f in sorted(dist.iterdir()):
    if f.suffix in (".wasm", ".js", ".css", ".html"):
        raw = f.read_bytes()
        gz = len(gzip.compress(raw, 9))
        scalar = "-scalar" in f.name
        total += 0 if scalar else gz
        note = " (the scalar build: not in the landing load)" if scalar else ""
        print(f"  {f.name:48} {len(raw) / 1e6:7.3f} MB raw {gz / 1e6:7.3f} MB gzip{note}")
print(f"  page load (landing): {total / 1e6:.3f} MB gzip")
if total >= 2e6:
    sys.exit(f"the landing page load is {total / 1e6:.3f} MB gzip, over the 2 MB budget")
PY

# ---- end to end ---------------------------------------------------------------------------
PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
python3 -m http.server "$PORT" --bind 127.0.0.1 --directory "$DIST" > /dev/null 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2> /dev/null || true' EXIT
for _ in $(seq 50); do
    curl -fs "http://127.0.0.1:$PORT/" > /dev/null 2>&1 && break
    sleep 0.1
done
SHOTS="$ROOT/target/web-screenshots"
rm -rf "$SHOTS"
step "end to end: every page in headless Chromium (screenshots in target/web-screenshots/)"
NODE_PATH="$NODE_DIR/node_modules" node web/e2e/e2e.cjs "http://127.0.0.1:$PORT/" "$SHOTS" $FULL < /dev/null

step "web tests passed"
