#!/usr/bin/env bash
# Serves the browser app with the book beside it, for reading locally:
#
#   scripts/serve.sh [PORT]      # default 8000, then open http://127.0.0.1:PORT/
#
# Builds the app with trunk (release) if web/dist is missing or older than web/ and the
# crates; serves web/dist at /, the built book (book/book, from `mdbook build book`) at
# /book/ and `cargo doc` output (target/doc) at /doc/ when they exist. Tools as in
# scripts/test-web.sh (run it once to install trunk and wasm-opt).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PORT="${1:-8000}"
TOOLS="${BRRR_TOOLS_DIR:-$HOME/.cache/brrr-tools}"
export PATH="$TOOLS/bin:$TOOLS/node-web/node_modules/.bin:$PATH"

DIST="$ROOT/web/dist"
if [ ! -f "$DIST/index.html" ] ||
    [ -n "$(find web/src web/index.html web/style.css crates shaders -newer "$DIST/index.html" -type f -print -quit)" ]; then
    if ! command -v trunk > /dev/null; then
        echo "error: trunk is not installed; run scripts/test-web.sh once (it installs it into $TOOLS)" >&2
        exit 1
    fi
    echo "building the app (trunk build --release)..."
    (cd web && trunk build --release)
fi

# One folder of links: the app at /, the book at /book/, the docs at /doc/.
SITE="$(mktemp -d -t brrr-site.XXXXXX)"
trap 'rm -rf "$SITE"' EXIT
for f in "$DIST"/*; do ln -s "$f" "$SITE/"; done
if [ -d book/book ]; then
    ln -s "$ROOT/book/book" "$SITE/book"
else
    echo "note: no built book in book/book (build it with: mdbook build book); /book/ will be missing"
fi
if [ -d target/doc ]; then
    ln -s "$ROOT/target/doc" "$SITE/doc"
else
    echo "note: no crate docs in target/doc (build them with: cargo doc --no-deps --workspace); /doc/ will be missing"
fi
echo "serving http://127.0.0.1:$PORT/ (app), /book/, /doc/ — Ctrl-C stops"
python3 -m http.server "$PORT" --bind 127.0.0.1 --directory "$SITE"
