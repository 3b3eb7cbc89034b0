#!/usr/bin/env bash
# The wgpu backend's tests: the conformance suite natively on Vulkan (Mesa's lavapipe
# where there is no GPU) and `brrr train` on wgpu against cpu for 20 steps, then the same
# suite compiled to wasm32 in headless Chromium on WebGPU.
#
#   scripts/test-wgpu.sh            # both
#   scripts/test-wgpu.sh native     # only the native suite
#   scripts/test-wgpu.sh browser    # only the browser suite
#   scripts/test-wgpu.sh install    # only install lavapipe (before the workspace tests,
#                                   # so that they find an adapter on a fresh machine)
#
# Installs what is missing, and only that (so a second run costs seconds):
#   - apt: mesa-vulkan-drivers libvulkan1 (lavapipe), chromium chromium-driver
#   - rustup target wasm32-unknown-unknown
#   - wasm-bindgen-cli at exactly Cargo.lock's wasm-bindgen version, into
#     $BRRR_TOOLS_DIR (default ~/.cache/brrr-tools)
# Non-interactive (CI=true, no stdin). Absence of a wgpu adapter is a failure here
# (BRRR_REQUIRE_WGPU=1), never a silent skip.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
WHAT="${1:-all}"
case "$WHAT" in
    all | native | browser | install) ;;
    *)
        echo "usage: $0 [all|native|browser|install]" >&2
        exit 2
        ;;
esac

BRRR_ROOT="$ROOT"
# shellcheck source=scripts/tools.sh
source "$ROOT/scripts/tools.sh"
export DEBIAN_FRONTEND=noninteractive
# lavapipe warns without it; any private directory will do.
if [ -z "${XDG_RUNTIME_DIR:-}" ] || [ ! -d "${XDG_RUNTIME_DIR}" ]; then
    export XDG_RUNTIME_DIR="${TMPDIR:-/tmp}/brrr-xdg-$(id -u)"
    mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
fi

T0=$SECONDS
step() { printf '\n==> [%4ds] %s\n' "$((SECONDS - T0))" "$*"; }

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

# ---- system packages, only if missing -------------------------------------------------
have_lavapipe() { compgen -G '/usr/share/vulkan/icd.d/lvp_icd*.json' > /dev/null; }
have_libvulkan() { ldconfig -p 2> /dev/null | grep -q 'libvulkan\.so\.1'; }
chromium_bin() { command -v chromium || command -v chromium-browser || true; }

missing=()
if [ "$WHAT" != browser ]; then
    have_lavapipe || missing+=(mesa-vulkan-drivers)
    have_libvulkan || missing+=(libvulkan1)
fi
if [ "$WHAT" = all ] || [ "$WHAT" = browser ]; then
    [ -n "$(chromium_bin)" ] || missing+=(chromium)
    command -v chromedriver > /dev/null || missing+=(chromium-driver)
fi
if [ ${#missing[@]} -gt 0 ]; then
    step "installing ${missing[*]}"
    if ! command -v apt-get > /dev/null; then
        echo "error: need ${missing[*]} (no apt-get here: install them by hand)" >&2
        exit 1
    fi
    $SUDO apt-get -o DPkg::Lock::Timeout=600 update -q < /dev/null
    $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}" < /dev/null
else
    step "system packages present (lavapipe, libvulkan1, chromium, chromedriver as needed)"
fi
if [ "$WHAT" = install ]; then exit 0; fi

# ---- Rust tools, only if missing ---------------------------------------------------------
if [ "$WHAT" != native ]; then
    if ! rustup target list --installed 2> /dev/null | grep -qx wasm32-unknown-unknown; then
        step "rustup target add wasm32-unknown-unknown"
        rustup target add wasm32-unknown-unknown < /dev/null
    fi
    step "wasm-bindgen-test-runner at Cargo.lock's version (scripts/tools.sh)"
    ensure_wasm_bindgen
fi

# ---- native: the conformance suite on wgpu (lavapipe here) -----------------------------
if [ "$WHAT" != browser ]; then
    step "cargo test -p brrr-wgpu (unit tests)"
    cargo test -q -p brrr-wgpu < /dev/null
    step "BRRR_REQUIRE_WGPU=1 cargo test -p brrr-conformance --test wgpu --test cpu_self --test train_wgpu"
    # --nocapture: the per-op tables (ops x dtypes, cases passed, worst error as a share of
    # its tolerance), the adapter and the per-step losses of cpu vs wgpu go to the log.
    BRRR_REQUIRE_WGPU=1 cargo test -p brrr-conformance --test wgpu --test cpu_self \
        --test train_wgpu -- --nocapture < /dev/null
fi

# ---- browser: the same suite in headless Chromium on WebGPU ------------------------------
if [ "$WHAT" != native ]; then
    CHROME="$(chromium_bin)"
    CHROMEDRIVER="$(command -v chromedriver)"
    export CHROMEDRIVER
    export WASM_BINDGEN_TEST_TIMEOUT="${WASM_BINDGEN_TEST_TIMEOUT:-900}"
    WEBDRIVER_JSON="$ROOT/tests/webdriver.json"
    if [ "$CHROME" != /usr/bin/chromium ]; then
        # tests/webdriver.json names /usr/bin/chromium; elsewhere, the same with this binary.
        WEBDRIVER_JSON="$(mktemp -t brrr-webdriver.XXXXXX.json)"
        sed "s#/usr/bin/chromium#$CHROME#" "$ROOT/tests/webdriver.json" > "$WEBDRIVER_JSON"
    fi
    export WASM_BINDGEN_TEST_WEBDRIVER_JSON="$WEBDRIVER_JSON"
    step "cargo test -p brrr-conformance --target wasm32-unknown-unknown --test web (headless $CHROME, WebGPU)"
    cargo test -p brrr-conformance --target wasm32-unknown-unknown --test web \
        -- --nocapture < /dev/null
    step "cargo test -p brrr-train --target wasm32-unknown-unknown --test web (a tiny GPT trains, async, on cpu and WebGPU)"
    cargo test -p brrr-train --target wasm32-unknown-unknown --test web \
        -- --nocapture < /dev/null
fi

step "wgpu tests passed"
