#!/usr/bin/env bash
# Installs everything kvscope's build and tests need on a fresh Debian 12 machine.
# Idempotent: each step checks for the pinned version first. Nothing is downloaded
# from GitHub: every tool comes from crates.io, Debian or PyPI (see docs/toolchain.md).
set -euo pipefail

# Versions are pinned: newer trunk/wasm-pack need a newer rustc than 1.95, and
# wasm-bindgen-cli must equal the wasm-bindgen crate in Cargo.lock.
TRUNK_VERSION=0.21.14
WASM_PACK_VERSION=0.15.1
# cargo-fuzz runs on stable with RUSTC_BOOTSTRAP=1 and `-s none` (scripts/fuzz.sh).
CARGO_FUZZ_VERSION=0.13.2
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

cargo fmt --version >/dev/null 2>&1 \
  || { log "adding rust component rustfmt"; rustup component add rustfmt; }

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
have_version cargo-fuzz "$CARGO_FUZZ_VERSION" || {
  log "installing cargo-fuzz $CARGO_FUZZ_VERSION"
  cargo install --locked cargo-fuzz --version "$CARGO_FUZZ_VERSION" --force
}
if [ "$want_trunk" = 1 ]; then
  have_version trunk "$TRUNK_VERSION" || {
    log "installing trunk $TRUNK_VERSION"
    cargo install --locked trunk --version "$TRUNK_VERSION" --force
  }
fi

# Debian's packages: the browser and its driver for the page tests, Prometheus (promtool and
# the server) for the /metrics tests.
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
# A real NATS server for the event-plane tests (server/tests/it/event_plane.rs).
[ -x /usr/sbin/nats-server ] || command -v nats-server >/dev/null 2>&1 || missing+=(nats-server)
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]} from Debian"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The real peers' Python side, in a virtualenv of its own (scripts/peers/README.md):
# vLLM's publisher needs pyzmq and msgspec.
PEERS=${KVSCOPE_PEERS:-$HOME/.cache/kvscope/peers}
VENV="$PEERS/venv"
[ -x "$VENV/bin/python" ] || { log "creating the peers' virtualenv in $VENV"; python3 -m venv "$VENV"; }
"$VENV/bin/python" -c 'import zmq, msgspec' 2>/dev/null || {
  log "installing pyzmq and msgspec into $VENV"
  "$VENV/bin/python" -m pip install --quiet 'pyzmq>=26,<28' 'msgspec==0.23.0'
}

# NVIDIA Dynamo's own KV-event relay (KvEventPublisher), for the event-plane tests; a 75 MB
# wheel that pulls only pydantic and uvloop.
DYNAMO_RUNTIME_VERSION=1.6.1
"$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('ai-dynamo-runtime') != '$DYNAMO_RUNTIME_VERSION')" 2>/dev/null || {
  log "installing ai-dynamo-runtime==$DYNAMO_RUNTIME_VERSION into $VENV"
  "$VENV/bin/python" -m pip install --quiet "ai-dynamo-runtime==$DYNAMO_RUNTIME_VERSION"
}

# vLLM's own publisher: only vllm/distributed/kv_events.py of the release wheel is used.
VLLM_VERSION=0.33.0
VLLM_DIR="$PEERS/vllm-$VLLM_VERSION"
[ -f "$VLLM_DIR/vllm/distributed/kv_events.py" ] || {
  log "fetching vllm==$VLLM_VERSION (wheel, no dependencies) for its kv_events.py"
  wheels=$(mktemp -d)
  "$VENV/bin/python" -m pip download --quiet --no-deps "vllm==$VLLM_VERSION" -d "$wheels"
  mkdir -p "$VLLM_DIR"
  "$VENV/bin/python" - "$wheels"/vllm-*.whl "$VLLM_DIR" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extract("vllm/distributed/kv_events.py", sys.argv[2])
PY
  rm -rf "$wheels"
}
log "tools ready"
