#!/usr/bin/env bash
# The dashboard's engine worker alone (issue 22, step 1): a pass over a recorded stream through
# the worker's Engine, natively (criterion) and in Chromium (its wasm build in a dedicated
# worker), each against decode and decode+normalize of the same bytes in the same run; then a
# capture of small SGLang events (128 MB) and one of Kimi-K3 batches (128 MB), recorded from
# `kvscope demo`, each opened through the page with one engine worker and with two, against
# `kvscope check` of the same file. Written into BENCHMARKS.md
# as section "7. The engine worker alone".
#
#   scripts/bench_engine.sh                               # about 12 minutes on 2 cores, after a build
#   KVSCOPE_ENGINE_REPORT_ONLY=1 scripts/bench_engine.sh  # rewrite the section from the last run
#
# Log in target/bench-run/engine/; the figures from criterion's estimates (target/criterion).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
RUN=target/bench-run/engine
mkdir -p "$RUN"

# record_capture FILE FRAMES DEMO-ARGS...: the demo's workers publish FRAMES batches in all,
# recorded until the server has read every one, then the demo stopped with SIGINT so that the
# capture is closed.
record_capture() {
  local file=$1 frames=$2 port; shift 2
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  rm -f "$file"
  target/release/kvscope demo --listen "127.0.0.1:$port" "$@" --no-event-plane --record "$file" >"$RUN/record.log" 2>&1 &
  local demo=$! n=0
  for _ in $(seq 300); do
    sleep 1
    n=$(curl -sf "http://127.0.0.1:$port/metrics" | awk '/^kvscope_frames_total/ { s += $2 } END { print s + 0 }')
    [ "$n" -ge "$frames" ] && break
  done
  kill -INT "$demo"; wait "$demo" || true
  [ "$n" -ge "$frames" ] || { echo "[bench-engine] the demo recorded $n of $frames frames; see $RUN/record.log" >&2; exit 1; }
}

# open_capture FILE BLOCK-SIZE ENGINES: the capture opened in the page with ENGINES engine
# workers (?engines=), its BENCH line appended to capture.log.
open_capture() {
  KVSCOPE_BIN="$ROOT/target/release/kvscope" KVSCOPE_BENCH_CAPTURE="$ROOT/$1" KVSCOPE_BENCH_BLOCK_SIZE="$2" KVSCOPE_E2E_ENGINES="$3" \
    cargo bench -p kvscope-e2e --bench browser >>"$RUN/capture.log" 2>&1 \
    || { tail -40 "$RUN/capture.log"; echo "[bench-engine] the capture bench failed; see $RUN/capture.log" >&2; exit 1; }
}

if [ "${KVSCOPE_ENGINE_REPORT_ONLY:-0}" != 1 ]; then
  rm -rf target/criterion/engine_kimi_k3 target/criterion/engine_fleet16
  {
    echo "date=$(date -u +%Y-%m-%dT%H:%MZ)"
    echo "cores=$(nproc)"
    echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
    echo "commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  } >"$RUN/run.txt"
  echo "[bench-engine] criterion: decode, normalize, the engine without and with the router side, a summary" >&2
  cargo bench -p kvscope-engine --bench engine >"$RUN/engine.log" 2>&1 \
    || { tail -40 "$RUN/engine.log"; echo "[bench-engine] the engine bench failed; see $RUN/engine.log" >&2; exit 1; }
  echo "[bench-engine] the same in Chromium: the engine's wasm build in a dedicated worker (tests/wasm_bench.rs)" >&2
  command -v chromium >/dev/null && echo "chromium=$(chromium --version 2>/dev/null | head -1)" >>"$RUN/run.txt"
  # The wasm test runner prefers geckodriver when one is on PATH; name chromedriver explicitly.
  CHROMEDRIVER=${CHROMEDRIVER:-/usr/bin/chromedriver} WASM_BINDGEN_TEST_TIMEOUT=${WASM_BINDGEN_TEST_TIMEOUT:-600} \
    CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner \
    cargo test --release -p kvscope-engine --target wasm32-unknown-unknown --test wasm_bench -- --nocapture >"$RUN/wasm.log" 2>&1 \
    || { tail -40 "$RUN/wasm.log"; echo "[bench-engine] the wasm engine bench failed; see $RUN/wasm.log" >&2; exit 1; }
  echo "[bench-engine] a capture opened in the page (tests/e2e/browser_bench.rs), against kvscope check" >&2
  scripts/build-web.sh >"$RUN/build-web.log" 2>&1 || { tail -30 "$RUN/build-web.log"; exit 1; }
  KVSCOPE_REQUIRE_WEB=1 cargo build --release -p kvscope >"$RUN/kvscope-build.log" 2>&1 \
    || { tail -30 "$RUN/kvscope-build.log"; exit 1; }
  # Two captures: 16 SGLang workers x 20,000 batches of small events (320,000 frames, about
  # 128 MB), and 16 Kimi-K3 workers x 320 batches of 43-64 KB (5,120 frames, about 128 MB; read
  # at the model's block size, 1536). Each opened with one engine worker and with two, in turn,
  # twice: the machine is shared, so the pairs show the noise.
  : >"$RUN/capture.log"
  record_capture "$RUN/capture-small.kvcap" 320000 --scenario sglang-tiers --workers 16 --rate 2000 --batches 20000
  record_capture "$RUN/capture-kimi.kvcap" 5120 --scenario kimi-k3 --workers 16 --rate 40 --batches 320
  for round in 1 2; do
    for engines in 1 2; do
      echo "[bench-engine] round $round: the captures opened with $engines engine worker(s)" >&2
      open_capture "$RUN/capture-small.kvcap" 16 "$engines"
      open_capture "$RUN/capture-kimi.kvcap" 1536 "$engines"
    done
  done
  rm -f "$RUN/capture-small.kvcap" "$RUN/capture-kimi.kvcap"
  echo "load=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$RUN/run.txt"
fi
python3 scripts/bench_engine_report.py "$RUN"
