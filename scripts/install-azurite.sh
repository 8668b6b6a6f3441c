#!/usr/bin/env bash
# Install Azurite, Azure's blob-storage emulator, for the `checkpoint_storage: {type: azure}`
# tests (tests/cloud_storage.py starts it on loopback).
#
#     bash scripts/install-azurite.sh
#
# Idempotent: does nothing when $AZURITE_PREFIX (default ~/.cache/det-lite/azurite) already holds
# the pinned version. Uses the machine's npm (Node.js >= 18); nothing is downloaded at test time.
set -euo pipefail

VERSION="3.35.0"
PREFIX="${AZURITE_PREFIX:-$HOME/.cache/det-lite/azurite}"
BIN="$PREFIX/node_modules/.bin/azurite-blob"
INSTALLED="$PREFIX/node_modules/azurite/package.json"

if [[ -x "$BIN" && -f "$INSTALLED" ]] && grep -q "\"version\": \"$VERSION\"" "$INSTALLED"; then
    echo "install-azurite: azurite $VERSION already installed at $BIN"
    exit 0
fi
if ! command -v npm >/dev/null; then
    echo "install-azurite: npm is needed to install azurite $VERSION (install Node.js >= 18)" >&2
    exit 1
fi
mkdir -p "$PREFIX"
npm install --no-audit --no-fund --silent --prefix "$PREFIX" "azurite@$VERSION"
echo "install-azurite: azurite $VERSION installed at $BIN"
