#!/usr/bin/env bash
# Installs what kvscope needs on a fresh Debian 12 machine, for one of two jobs:
#
#   scripts/install-tools.sh demo   the dashboard and the server: the wasm32 target, trunk and
#                                   wasm-bindgen-cli (what scripts/demo.sh needs, nothing more)
#   scripts/install-tools.sh test   all of demo's, then what the tests add: clippy, rustfmt,
#                                   wasm-pack, cargo-fuzz, Debian's chromium, chromium-driver,
#                                   prometheus, nats-server and etcd-server (and nodejs if no
#                                   node is on PATH), and the real peers' virtualenv (the default)
#
# Idempotent: each step checks for the pinned version first and says what it does and about how
# long it takes on 2 cores; what is missing builds and downloads side by side. Nothing is downloaded from GitHub: every tool comes from crates.io,
# Debian or PyPI, and the README says how each is pinned.
set -euo pipefail

job=test
for arg in "$@"; do
  case "$arg" in
    demo | test) job=$arg ;;
    --no-trunk) ;; # kept for old callers; trunk is part of both jobs
    *) echo "usage: scripts/install-tools.sh [demo|test]" >&2; exit 2 ;;
  esac
done

# Versions are pinned: newer trunk/wasm-pack need a newer rustc than 1.95, and
# wasm-bindgen-cli must equal the wasm-bindgen crate in Cargo.lock.
TRUNK_VERSION=0.21.14
WASM_PACK_VERSION=0.15.1
# cargo-fuzz runs on stable with RUSTC_BOOTSTRAP=1 and `-s none` (scripts/fuzz.sh).
CARGO_FUZZ_VERSION=0.13.2
WASM_BINDGEN_VERSION=$(awk '/^name = "wasm-bindgen"$/{getline; gsub(/[^0-9.]/,""); print; exit}' "$(dirname "$0")/../Cargo.lock" 2>/dev/null || true)
WASM_BINDGEN_VERSION=${WASM_BINDGEN_VERSION:-0.2.130}

log() { printf '[install-tools] %s\n' "$*" >&2; }

# The tools are built for this machine only: no link-time optimisation, parallel codegen, light
# optimisation and no debug info make their cold builds several times faster (trunk: 12 min 42 s
# with its own `lto = "fat"`, `codegen-units = 1`; see BENCHMARKS.md, "First run"), and none of
# them does work where that shows: they spawn cargo and rewrite a few MB of wasm once per build.
# Cargo's config profiles take precedence over a package's own.
tool_install() {
  CARGO_PROFILE_RELEASE_LTO=off CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 CARGO_PROFILE_RELEASE_DEBUG=0 \
    CARGO_PROFILE_RELEASE_OPT_LEVEL=1 cargo install "$@"
}

have_version() { command -v "$1" >/dev/null 2>&1 && "$1" --version 2>/dev/null | grep -q "$2"; }

# What is missing is installed side by side: one cargo build leaves a core idle in its serial
# stretches (build scripts, the final crates, linking), and apt and pip wait on downloads. Each
# job's output goes to a log of its own, printed if it fails; `finish` waits for them all.
jobs_pids=()
jobs_names=()
jobs_logs=()
in_background() {
  local name=$1
  shift
  local out
  out=$(mktemp)
  (
    start=$SECONDS
    "$@"
    printf '[install-tools] %s: done in %d s\n' "$name" $((SECONDS - start)) >&2
  ) >"$out" 2>&1 &
  jobs_pids+=($!)
  jobs_names+=("$name")
  jobs_logs+=("$out")
}
finish() {
  local failed=0 i
  for i in "${!jobs_pids[@]}"; do
    if wait "${jobs_pids[$i]}"; then
      tail -n 1 "${jobs_logs[$i]}" >&2
    else
      log "${jobs_names[$i]} failed; the end of its output:"
      tail -n 40 "${jobs_logs[$i]}" >&2
      failed=1
    fi
    rm -f "${jobs_logs[$i]}"
  done
  jobs_pids=()
  jobs_names=()
  jobs_logs=()
  return "$failed"
}

# rustup changes the toolchain, so it runs first, before any build starts.
rustup_parts() {
  rustup target list --installed | grep -qx wasm32-unknown-unknown \
    || { log "adding rust target wasm32-unknown-unknown (seconds)"; rustup target add wasm32-unknown-unknown; }
  [ "$job" = test ] || return 0
  cargo clippy --version >/dev/null 2>&1 || { log "adding rust component clippy"; rustup component add clippy; }
  cargo fmt --version >/dev/null 2>&1 || { log "adding rust component rustfmt"; rustup component add rustfmt; }
}

rust_for_demo() {
  have_version wasm-bindgen "$WASM_BINDGEN_VERSION" || {
    log "building wasm-bindgen-cli $WASM_BINDGEN_VERSION (2-4 min of 2 cores)"
    # Without --locked: the CLI's own lockfile names a crate version the registry lacks.
    in_background wasm-bindgen-cli tool_install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION" --force
  }
  have_version trunk "$TRUNK_VERSION" || {
    log "building trunk $TRUNK_VERSION (4-7 min of 2 cores)"
    # No default features: `update_check` asks GitHub for releases, and `rustls` is for
    # downloads the build never makes (wasm-bindgen and wasm-opt come from PATH).
    in_background trunk tool_install --locked trunk --version "$TRUNK_VERSION" --no-default-features --force
  }
}

rust_for_tests() {
  have_version wasm-pack "$WASM_PACK_VERSION" || {
    log "building wasm-pack $WASM_PACK_VERSION (2-3 min of 2 cores)"
    in_background wasm-pack tool_install --locked wasm-pack --version "$WASM_PACK_VERSION" --force
  }
  have_version cargo-fuzz "$CARGO_FUZZ_VERSION" || {
    log "building cargo-fuzz $CARGO_FUZZ_VERSION (about 1 min of 2 cores)"
    in_background cargo-fuzz tool_install --locked cargo-fuzz --version "$CARGO_FUZZ_VERSION" --force
  }
}

debian_for_tests() {
  # The browser and its driver for the page tests, Prometheus (promtool and the server) for the
  # /metrics tests, a real NATS server for the event-plane tests, etcd for Dynamo's discovery.
  local missing=()
  command -v chromium >/dev/null 2>&1 || missing+=(chromium)
  command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
  command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
  [ -x /usr/sbin/nats-server ] || command -v nats-server >/dev/null 2>&1 || missing+=(nats-server)
  command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
  command -v node >/dev/null 2>&1 || missing+=(nodejs)
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]} from Debian (about 1 min)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

peers_for_tests() {
  # The real peers' Python side, in a virtualenv of its own: vLLM's publisher needs pyzmq and
  # msgspec; NVIDIA Dynamo's runtime brings its relay (KvEventPublisher) and its standalone
  # indexer (python -m dynamo.indexer), a 75 MB wheel that pulls only pydantic and uvloop.
  local peers=${KVSCOPE_PEERS:-$HOME/.cache/kvscope/peers}
  local venv="$peers/venv"
  [ -x "$venv/bin/python" ] || { log "creating the peers' virtualenv in $venv"; python3 -m venv "$venv"; }
  "$venv/bin/python" -c 'import zmq, msgspec' 2>/dev/null || {
    log "installing pyzmq and msgspec into $venv (seconds)"
    "$venv/bin/python" -m pip install --quiet 'pyzmq>=26,<28' 'msgspec==0.23.0'
  }
  local dynamo=1.6.1
  "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('ai-dynamo-runtime') != '$dynamo')" 2>/dev/null || {
    log "installing ai-dynamo-runtime==$dynamo into $venv (under a minute)"
    "$venv/bin/python" -m pip install --quiet "ai-dynamo-runtime==$dynamo"
  }
  # vLLM's own publisher: only vllm/distributed/kv_events.py of the release wheel is used.
  local vllm=0.33.0
  local dir="$peers/vllm-$vllm"
  [ -f "$dir/vllm/distributed/kv_events.py" ] || {
    log "fetching vllm==$vllm (a 336 MB wheel, no dependencies) for its kv_events.py"
    local wheels
    wheels=$(mktemp -d)
    "$venv/bin/python" -m pip download --quiet --no-deps "vllm==$vllm" -d "$wheels"
    mkdir -p "$dir"
    "$venv/bin/python" - "$wheels"/vllm-*.whl "$dir" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extract("vllm/distributed/kv_events.py", sys.argv[2])
PY
    rm -rf "$wheels"
  }
}

rustup_parts
rust_for_demo
if [ "$job" = test ]; then
  rust_for_tests
  in_background "Debian's packages" debian_for_tests
  in_background "the peers' virtualenv" peers_for_tests
fi
finish || { log "some tools failed to install (above); nothing else was changed"; exit 1; }
log "tools ready for the $job"
