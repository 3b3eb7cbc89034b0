# shellcheck shell=bash
# The tools the book, the browser tests and the demos need, installed once into
# $BRRR_TOOLS_DIR (default ~/.cache/brrr-tools) and reused: each `ensure_*` costs nothing
# when the right version is already there. Sourced by test-web.sh, test-wgpu.sh,
# test-book.sh and serve.sh, so that each of them works alone on a fresh machine.
#
#   ensure_wasm_target   rustup target wasm32-unknown-unknown
#   ensure_wasm_bindgen  wasm-bindgen and wasm-bindgen-test-runner at Cargo.lock's version
#   ensure_node_web      npm: puppeteer-core (drives Chromium) and binaryen (wasm-opt)
#   ensure_mdbook        mdbook, with search and without its server and file watcher
#
# Why these and no more: the browser app is built by scripts/build-web.sh from these
# three tools (cargo, wasm-bindgen, wasm-opt) instead of trunk, whose build from source
# alone took about 7.5 of a cold test run's minutes on two cores.
#
# Every install is built with cargo's default release profile overridden to what a tool
# needs (no LTO, many codegen units) and holds a lock, so that two scripts running at once
# do not install the same tool twice.

BRRR_TOOLS="${BRRR_TOOLS_DIR:-$HOME/.cache/brrr-tools}"
BRRR_NODE_DIR="$BRRR_TOOLS/node-web"
MDBOOK_VERSION=0.5.4
PUPPETEER_VERSION=24.43.1 # the last line that runs on node 20 (25.x needs node 22)
BINARYEN_VERSION=132.0.0  # wasm-opt 132; Debian's 108 cannot parse current Rust output
export PATH="$BRRR_TOOLS/bin:$BRRR_NODE_DIR/node_modules/.bin:$PATH"
mkdir -p "$BRRR_TOOLS"

# tool_install NAME ARGS...: `cargo install ARGS` into $BRRR_TOOLS, quickly built.
tool_install() {
    local name="$1"
    shift
    echo "installing $name into $BRRR_TOOLS (once; later runs reuse it)"
    env -u CARGO_TARGET_DIR CARGO_PROFILE_RELEASE_LTO=false \
        CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
        cargo install "$@" --root "$BRRR_TOOLS" --force < /dev/null
}

ensure_wasm_target() {
    if rustup target list --installed 2> /dev/null | grep -qx wasm32-unknown-unknown; then
        return 0
    fi
    rustup target add wasm32-unknown-unknown < /dev/null
}

# The version Cargo.lock pins: the CLI must match the wasm-bindgen crate exactly.
wasm_bindgen_version() {
    awk '/^name = "wasm-bindgen"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' \
        "${BRRR_ROOT:-.}/Cargo.lock"
}

ensure_wasm_bindgen() {
    local want
    want="$(wasm_bindgen_version)"
    if [ -z "$want" ]; then
        echo "error: no wasm-bindgen in Cargo.lock" >&2
        return 1
    fi
    (
        flock 9
        if [ "$(wasm-bindgen --version 2> /dev/null | awk '{print $2}')" = "$want" ] &&
            [ "$(wasm-bindgen-test-runner --version 2> /dev/null | awk '{print $2}')" = "$want" ]; then
            exit 0
        fi
        # No default features: they add TLS (rustls and its C crypto), and the test
        # runner only talks plain HTTP to a local chromedriver. `--locked` is left out on
        # purpose: a dependency its lock file pins is missing from the registry.
        tool_install "wasm-bindgen-cli $want" wasm-bindgen-cli --version "=$want" \
            --no-default-features
    ) 9> "$BRRR_TOOLS/wasm-bindgen.lock"
}

ensure_node_web() {
    local want_pkg
    want_pkg="{\"name\":\"brrr-web-tools\",\"private\":true,\"dependencies\":{\"puppeteer-core\":\"$PUPPETEER_VERSION\",\"binaryen\":\"$BINARYEN_VERSION\"}}"
    if [ "$(cat "$BRRR_NODE_DIR/package.json" 2> /dev/null)" = "$want_pkg" ] &&
        [ -x "$BRRR_NODE_DIR/node_modules/.bin/wasm-opt" ]; then
        return 0
    fi
    if ! command -v npm > /dev/null; then
        echo "error: npm is missing (apt-get install nodejs npm)" >&2
        return 1
    fi
    echo "npm install puppeteer-core@$PUPPETEER_VERSION binaryen@$BINARYEN_VERSION into $BRRR_NODE_DIR"
    mkdir -p "$BRRR_NODE_DIR"
    (
        flock 9
        printf '%s' "$want_pkg" > "$BRRR_NODE_DIR/package.json"
        cd "$BRRR_NODE_DIR" &&
            PUPPETEER_SKIP_DOWNLOAD=1 npm install --no-audit --no-fund --loglevel=error < /dev/null
    ) 9> "$BRRR_TOOLS/node-web.lock"
}

ensure_mdbook() {
    (
        flock 9
        if [ "$(mdbook --version 2> /dev/null)" = "mdbook v$MDBOOK_VERSION" ]; then
            exit 0
        fi
        # Search stays (the book's search box); the server and the file watcher go
        # (scripts/serve.sh serves the built book), and with them tokio and axum.
        tool_install "mdbook $MDBOOK_VERSION" mdbook --version "$MDBOOK_VERSION" --locked \
            --no-default-features --features search
    ) 9> "$BRRR_TOOLS/mdbook.lock"
}
