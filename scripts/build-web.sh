#!/usr/bin/env bash
# Builds the browser app (web/) into web/dist: the whole of what a wasm web app's bundler
# does, in four commands one can read and run by hand.
#
#   1. cargo build --release --target wasm32-unknown-unknown -p brrr-web   (the app), twice:
#      with wasm SIMD (simd128, .cargo/config.toml's flags; every current browser has
#      it) and without, for a browser that lacks it
#   2. wasm-bindgen --target web      (the JS glue that loads the module and binds the DOM)
#   3. wasm-opt -Oz                   (binaryen: smaller download, same code)
#   4. index.html with the files' content hashes in their names, so a browser never runs
#      a stale module beside a new page; style.css and the training page's corpus beside it.
#      Its loader validates a one-instruction SIMD module and fetches the build the
#      browser can run (`?wasm=scalar` in the address asks for the scalar one).
#
#   scripts/build-web.sh [DIST]       (default web/dist; replaced only once complete)
#
# Installs wasm-bindgen (Cargo.lock's version) and wasm-opt (npm's binaryen) if missing
# (scripts/tools.sh).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BRRR_ROOT="$ROOT"
# shellcheck source=scripts/tools.sh
source "$ROOT/scripts/tools.sh"

DIST="${1:-$ROOT/web/dist}"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"

ensure_wasm_target
ensure_wasm_bindgen
ensure_node_web

# No debug line tables: wasm-opt drops them anyway, and emitting them costs build time.
# scripts/test-web.sh builds its wasm32 tests with the same setting, so this build
# reuses what they compiled.
CARGO_PROFILE_RELEASE_DEBUG=false \
    cargo build --release --target wasm32-unknown-unknown -p brrr-web --bin brrr-web < /dev/null
# The scalar build: the config's flags without +simd128 (RUSTFLAGS replaces the config's
# list, where CARGO_TARGET_..._RUSTFLAGS would be appended to it), in a target folder of
# its own so that neither build undoes the other's.
SCALAR_TARGET_DIR="$TARGET_DIR/wasm-scalar"
CARGO_PROFILE_RELEASE_DEBUG=false CARGO_TARGET_DIR="$SCALAR_TARGET_DIR" \
    RUSTFLAGS="--cfg=web_sys_unstable_apis" \
    cargo build --release --target wasm32-unknown-unknown -p brrr-web --bin brrr-web < /dev/null

STAGE="$(mktemp -d "${DIST%/}.partial.XXXXXX")"
trap 'rm -rf "$STAGE"' EXIT
chmod 755 "$STAGE"
# bind NAME WASM: the JS glue and the optimised module, as NAME.js and NAME_bg.wasm.
bind() {
    wasm-bindgen --target web --no-typescript --out-dir "$STAGE" --out-name "$1" "$2"
    # Rust's wasm32 output uses these proposals (every current browser has them);
    # wasm-opt must be told, or it refuses the module.
    wasm-opt -Oz --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext \
        --enable-mutable-globals --enable-reference-types --enable-multivalue --enable-simd \
        "$STAGE/$1_bg.wasm" -o "$STAGE/opt.wasm"
    mv "$STAGE/opt.wasm" "$STAGE/$1_bg.wasm"
}
bind brrr-web "$TARGET_DIR/wasm32-unknown-unknown/release/brrr-web.wasm"
bind brrr-web-scalar "$SCALAR_TARGET_DIR/wasm32-unknown-unknown/release/brrr-web.wasm"

# hashed NAME EXT: moves $STAGE/NAME.EXT to NAME-HASH.EXT and prints the new name.
hashed() {
    local hash
    hash="$(sha256sum "$STAGE/$1.$2" | cut -c1-16)"
    mv "$STAGE/$1.$2" "$STAGE/$1-$hash.$2"
    echo "$1-$hash.$2"
}
cp web/style.css "$STAGE/style.css"
cp crates/brrr/corpus/sotu.txt "$STAGE/sotu.txt"
CSS="$(hashed style css)"
WASM="$(hashed brrr-web_bg wasm)"
JS="$(hashed brrr-web js)"
WASM_SCALAR="$(hashed brrr-web-scalar_bg wasm)"
JS_SCALAR="$(hashed brrr-web-scalar js)"

# The page: web/index.html with its assets line replaced by the built files. The probe
# is the module (func (result v128) (v128.const i32x4 0 0 0 0)): a browser without wasm
# SIMD does not validate it, and would refuse the whole SIMD build the same way.
ASSETS="<link rel=\"stylesheet\" href=\"./$CSS\" />
    <script type=\"module\">
        const probe = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0,
            10, 22, 1, 20, 0, 253, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 11]);
        const simd = new URLSearchParams(location.search).get('wasm') !== 'scalar'
            && WebAssembly.validate(probe);
        window.brrrWasm = simd ? 'simd128' : 'scalar';
        const [js, wasm] = simd ? ['./$JS', './$WASM'] : ['./$JS_SCALAR', './$WASM_SCALAR'];
        const { default: init } = await import(js);
        await init({ module_or_path: wasm });
    </script>"
python3 - web/index.html "$STAGE/index.html" "$ASSETS" << 'PY'
import sys
src, dst, assets = sys.argv[1:]
page = open(src, encoding="utf-8").read()
marker = "<!-- assets: scripts/build-web.sh -->"
if page.count(marker) != 1:
    sys.exit(f"{src}: expected the line {marker!r} exactly once")
open(dst, "w", encoding="utf-8").write(page.replace(marker, assets))
PY

# Replace the old dist only now that the new one is whole.
rm -rf "$DIST.old"
if [ -d "$DIST" ]; then mv "$DIST" "$DIST.old"; fi
mv "$STAGE" "$DIST"
trap - EXIT
rm -rf "$DIST.old"
echo "built $DIST: $(cd "$DIST" && ls | tr '\n' ' ')"
