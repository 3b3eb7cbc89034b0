#!/usr/bin/env bash
# Builds the browser app (web/) into web/dist: the whole of what a wasm web app's bundler
# does, in four commands one can read and run by hand.
#
#   1. cargo build --release --target wasm32-unknown-unknown -p brrr-web   (the app)
#   2. wasm-bindgen --target web      (the JS glue that loads the module and binds the DOM)
#   3. wasm-opt -Oz                   (binaryen: smaller download, same code)
#   4. index.html with the files' content hashes in their names, so a browser never runs
#      a stale module beside a new page; style.css and the training page's corpus beside it.
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

STAGE="$(mktemp -d "${DIST%/}.partial.XXXXXX")"
trap 'rm -rf "$STAGE"' EXIT
chmod 755 "$STAGE"
wasm-bindgen --target web --no-typescript --out-dir "$STAGE" --out-name brrr-web \
    "$TARGET_DIR/wasm32-unknown-unknown/release/brrr-web.wasm"
# Rust's wasm32 output uses these proposals (every current browser has them); wasm-opt
# must be told, or it refuses the module.
wasm-opt -Oz --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext \
    --enable-mutable-globals --enable-reference-types --enable-multivalue \
    "$STAGE/brrr-web_bg.wasm" -o "$STAGE/opt.wasm"
mv "$STAGE/opt.wasm" "$STAGE/brrr-web_bg.wasm"

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

# The page: web/index.html with its assets line replaced by the built files.
ASSETS="<link rel=\"stylesheet\" href=\"./$CSS\" />
    <link rel=\"modulepreload\" href=\"./$JS\" />
    <link rel=\"preload\" href=\"./$WASM\" as=\"fetch\" type=\"application/wasm\" crossorigin />
    <script type=\"module\">
        import init from './$JS';
        await init({ module_or_path: './$WASM' });
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
