#!/usr/bin/env bash
# Serves the browser app with the book beside it, for reading locally:
#
#   scripts/serve.sh [PORT]      # default 8000, then open http://127.0.0.1:PORT/
#
# Works on a fresh machine: installs what it needs (the wasm32 target, wasm-bindgen,
# npm's binaryen, mdbook; scripts/tools.sh, once, into ~/.cache/brrr-tools), builds the
# app (scripts/build-web.sh, release) when web/dist is missing or older than the sources,
# builds the book (book/book) when it is missing or older than book/src, and serves the
# app at /, the book at /book/ and `cargo doc` output (target/doc) at /doc/ if it exists.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PORT="${1:-8000}"
case "$PORT" in
    '' | *[!0-9]*)
        echo "usage: $0 [PORT]   (PORT is a number, e.g. 8000)" >&2
        exit 2
        ;;
esac
BRRR_ROOT="$ROOT"
# shellcheck source=scripts/tools.sh
source "$ROOT/scripts/tools.sh"

# stale STAMP PATHS...: true when STAMP is missing or some file under PATHS is newer.
stale() {
    local stamp="$1"
    shift
    [ ! -f "$stamp" ] || [ -n "$(find "$@" -newer "$stamp" -type f -print -quit)" ]
}

DIST="$ROOT/web/dist"
if stale "$DIST/index.html" web/src web/index.html web/style.css crates shaders; then
    echo "building the app (scripts/build-web.sh, release; a few minutes the first time)..."
    bash scripts/build-web.sh "$DIST"
fi
if stale book/book/index.html book/src book/book.toml; then
    ensure_mdbook
    echo "building the book (mdbook build book)..."
    mdbook build book
fi

SITE="$(mktemp -d -t brrr-site.XXXXXX)"
trap 'rm -rf "$SITE"' EXIT
for f in "$DIST"/*; do ln -s "$f" "$SITE/"; done
ln -s "$ROOT/book/book" "$SITE/book"
if [ -d target/doc ]; then
    ln -s "$ROOT/target/doc" "$SITE/doc"
else
    echo "note: no crate docs in target/doc (build them with: cargo doc --no-deps --workspace); /doc/ will be missing"
fi
echo "serving http://127.0.0.1:$PORT/ (app), /book/, /doc/ — Ctrl-C stops"
python3 -m http.server "$PORT" --bind 127.0.0.1 --directory "$SITE"
