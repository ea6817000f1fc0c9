#!/usr/bin/env bash
# Installs everything kvscope's build and tests need on a fresh Debian 12 machine.
# Idempotent: each step checks for the pinned version first. Nothing is downloaded
# from GitHub: every tool comes from crates.io, Debian or PyPI (see docs/toolchain.md).
set -euo pipefail

# Versions are pinned: newer trunk/wasm-pack need a newer rustc than 1.95, and
# wasm-bindgen-cli must equal the wasm-bindgen crate in Cargo.lock.
TRUNK_VERSION=0.21.14
WASM_PACK_VERSION=0.15.1
WASM_BINDGEN_VERSION=$(awk '/^name = "wasm-bindgen"$/{getline; gsub(/[^0-9.]/,""); print; exit}' "$(dirname "$0")/../Cargo.lock" 2>/dev/null || true)
WASM_BINDGEN_VERSION=${WASM_BINDGEN_VERSION:-0.2.130}

want_trunk=1
for arg in "$@"; do
  case "$arg" in
    --no-trunk) want_trunk=0 ;;
  esac
done

log() { printf '[install-tools] %s\n' "$*" >&2; }

rustup target list --installed | grep -qx wasm32-unknown-unknown \
  || { log "adding rust target wasm32-unknown-unknown"; rustup target add wasm32-unknown-unknown; }

cargo clippy --version >/dev/null 2>&1 \
  || { log "adding rust component clippy"; rustup component add clippy; }

have_version() { command -v "$1" >/dev/null 2>&1 && "$1" --version 2>/dev/null | grep -q "$2"; }

have_version wasm-bindgen "$WASM_BINDGEN_VERSION" || {
  log "installing wasm-bindgen-cli $WASM_BINDGEN_VERSION"
  # Without --locked: the CLI's own lockfile names a crate version the registry lacks.
  cargo install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION" --force
}
have_version wasm-pack "$WASM_PACK_VERSION" || {
  log "installing wasm-pack $WASM_PACK_VERSION"
  cargo install --locked wasm-pack --version "$WASM_PACK_VERSION" --force
}
if [ "$want_trunk" = 1 ]; then
  have_version trunk "$TRUNK_VERSION" || {
    log "installing trunk $TRUNK_VERSION"
    cargo install --locked trunk --version "$TRUNK_VERSION" --force
  }
fi

if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  log "installing chromium and chromium-driver from Debian"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq chromium chromium-driver >/dev/null
fi

python3 -c 'import zmq' 2>/dev/null || {
  log "installing pyzmq (test publisher)"
  python3 -m pip install --quiet 'pyzmq>=26,<28'
}
log "tools ready"
