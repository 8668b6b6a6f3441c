#!/usr/bin/env bash
# Install the browser det-lite ui's tests drive: Debian's chromium and its chromedriver.
#
#     bash scripts/install-browser.sh
#
# Idempotent: does nothing when both are installed (CHROMIUM and CHROMEDRIVER name other
# binaries). Otherwise installs the two Debian packages with apt (as root, or through sudo).
# Selenium (the `test` extra) is pointed at these binaries; it never downloads a browser.
set -euo pipefail

CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
CHROMEDRIVER="${CHROMEDRIVER:-/usr/bin/chromedriver}"

if [[ -x "$CHROMIUM" && -x "$CHROMEDRIVER" ]]; then
    echo "install-browser: $CHROMIUM and $CHROMEDRIVER already installed"
    exit 0
fi

SUDO=()
if [[ "$(id -u)" != 0 ]]; then
    if ! command -v sudo >/dev/null; then
        echo "install-browser: need root (or sudo) to apt-get install chromium chromium-driver" >&2
        exit 1
    fi
    SUDO=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -q
"${SUDO[@]}" apt-get install -y -q --no-install-recommends chromium chromium-driver
"$CHROMIUM" --version
"$CHROMEDRIVER" --version
