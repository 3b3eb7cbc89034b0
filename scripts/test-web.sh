#!/usr/bin/env bash
# The browser app's tests: build it with trunk (release), run its logic tests natively and
# in headless Chromium (wasm-bindgen-test), then serve the built app on 127.0.0.1 and drive
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
#   - trunk 0.21.14 (cargo install --locked, about 5 minutes once)
#   - npm: puppeteer-core and binaryen (wasm-opt 132) into $BRRR_TOOLS_DIR/node-web
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
FULL=""
if [ "${1:-}" = "--full" ]; then FULL="--full"; fi

TOOLS="${BRRR_TOOLS_DIR:-$HOME/.cache/brrr-tools}"
NODE_DIR="$TOOLS/node-web"
TRUNK_VERSION=0.21.14
PUPPETEER_VERSION=24.43.1 # the last line that runs on node 20 (25.x needs node 22)
BINARYEN_VERSION=132.0.0  # wasm-opt 132; Debian's 108 cannot parse current Rust output
export PATH="$TOOLS/bin:$NODE_DIR/node_modules/.bin:$PATH"
export DEBIAN_FRONTEND=noninteractive
mkdir -p "$TOOLS"

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

# ---- Rust and node tools, each under a lock so parallel runs install once -------------
if ! rustup target list --installed 2> /dev/null | grep -qx wasm32-unknown-unknown; then
    step "rustup target add wasm32-unknown-unknown"
    rustup target add wasm32-unknown-unknown < /dev/null
fi
WBG_VERSION="$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' Cargo.lock)"
if [ "$(wasm-bindgen --version 2> /dev/null | awk '{print $2}')" != "$WBG_VERSION" ] ||
    [ "$(wasm-bindgen-test-runner --version 2> /dev/null | awk '{print $2}')" != "$WBG_VERSION" ]; then
    step "cargo install wasm-bindgen-cli $WBG_VERSION into $TOOLS"
    # Without --locked: with it, a pinned dependency is missing from the registry.
    flock "$TOOLS/wasm-bindgen.lock" env -u CARGO_TARGET_DIR cargo install wasm-bindgen-cli \
        --version "=$WBG_VERSION" --root "$TOOLS" --force < /dev/null
fi
if [ "$(trunk --version 2> /dev/null | awk '{print $2}')" != "$TRUNK_VERSION" ]; then
    step "cargo install trunk $TRUNK_VERSION into $TOOLS (about 5 minutes, once)"
    # trunk's release profile asks for fat LTO in one codegen unit at opt-level 3; built
    # without them it installs in 268 s instead of 417 s on 2 cores and builds web/dist
    # in the same time (72 s either way, measured 2026-11-25): its own work is small
    # beside cargo's, wasm-bindgen's and wasm-opt's.
    flock "$TOOLS/trunk.lock" bash -c "[ \"\$(trunk --version 2> /dev/null | awk '{print \$2}')\" = $TRUNK_VERSION ] ||
        env -u CARGO_TARGET_DIR CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
        CARGO_PROFILE_RELEASE_OPT_LEVEL=1 cargo install trunk --version $TRUNK_VERSION --locked --root '$TOOLS' < /dev/null"
fi
want_pkg="{\"name\":\"brrr-web-tools\",\"private\":true,\"dependencies\":{\"puppeteer-core\":\"$PUPPETEER_VERSION\",\"binaryen\":\"$BINARYEN_VERSION\"}}"
if [ "$(cat "$NODE_DIR/package.json" 2> /dev/null)" != "$want_pkg" ] || [ ! -x "$NODE_DIR/node_modules/.bin/wasm-opt" ]; then
    step "npm install puppeteer-core@$PUPPETEER_VERSION binaryen@$BINARYEN_VERSION into $NODE_DIR"
    mkdir -p "$NODE_DIR"
    (
        flock 9
        printf '%s' "$want_pkg" > "$NODE_DIR/package.json"
        # puppeteer-core never downloads a browser; the variable makes that explicit.
        cd "$NODE_DIR" && PUPPETEER_SKIP_DOWNLOAD=1 npm install --no-audit --no-fund --loglevel=error < /dev/null
    ) 9> "$TOOLS/node-web.lock"
fi
step "tools: trunk $(trunk --version | awk '{print $2}'), wasm-bindgen $WBG_VERSION, $(wasm-opt --version), chromium $("$CHROME" --version 2> /dev/null | awk '{print $2}')"

# ---- lint and unit tests ---------------------------------------------------------------
step "cargo clippy -p brrr-web --target wasm32-unknown-unknown --all-targets -- -D warnings"
cargo clippy -q -p brrr-web --target wasm32-unknown-unknown --all-targets -- -D warnings < /dev/null
step "cargo test -p brrr-web (the page logic, natively)"
cargo test -q -p brrr-web < /dev/null

export CHROMEDRIVER="$(command -v chromedriver)"
WEBDRIVER_JSON="$ROOT/web/webdriver.json"
if [ "$CHROME" != /usr/bin/chromium ]; then
    WEBDRIVER_JSON="$(mktemp -t brrr-webdriver.XXXXXX.json)"
    sed "s#/usr/bin/chromium#$CHROME#" "$ROOT/web/webdriver.json" > "$WEBDRIVER_JSON"
fi
export WASM_BINDGEN_TEST_WEBDRIVER_JSON="$WEBDRIVER_JSON"
step "cargo test -p brrr-web --target wasm32-unknown-unknown (headless Chromium)"
# No -q: cargo would pass --quiet to wasm-bindgen-test-runner, which rejects it.
cargo test -p brrr-web --target wasm32-unknown-unknown --test web < /dev/null

# ---- build ------------------------------------------------------------------------------
step "trunk build --release (web/dist)"
(cd web && trunk build --release < /dev/null)
DIST="$ROOT/web/dist"

# What the first page load fetches: index.html, the JS glue, the wasm and the CSS (the
# corpus is fetched only by the training page).
python3 - "$DIST" << 'PY'
import gzip, pathlib, sys
dist = pathlib.Path(sys.argv[1])
total = 0
for f in sorted(dist.iterdir()):
    if f.suffix in (".wasm", ".js", ".css", ".html"):
        raw = f.read_bytes()
        gz = len(gzip.compress(raw, 9))
        total += gz
        print(f"  {f.name:48} {len(raw) / 1e6:7.3f} MB raw {gz / 1e6:7.3f} MB gzip")
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
