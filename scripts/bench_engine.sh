#!/usr/bin/env bash
# The dashboard's engine worker alone (issue 22, step 1): a pass over a recorded stream through
# the worker's Engine, natively (criterion) and in Chromium (its wasm build in a dedicated
# worker), each against decode and decode+normalize of the same bytes in the same run; then a
# 128 MB capture (16 sources, 320k frames of small SGLang events, recorded from `kvscope demo`)
# opened through the page, against `kvscope check` of the same file. Written into BENCHMARKS.md
# as section "7. The engine worker alone".
#
#   scripts/bench_engine.sh                               # about 7 minutes on 2 cores, after a build
#   KVSCOPE_ENGINE_REPORT_ONLY=1 scripts/bench_engine.sh  # rewrite the section from the last run
#
# Log in target/bench-run/engine/; the figures from criterion's estimates (target/criterion).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
RUN=target/bench-run/engine
mkdir -p "$RUN"

# record_capture FILE: 16 demo workers x 20,000 SGLang batches (320,000 frames), recorded until
# the server has read every one, then the demo stopped with SIGINT so the capture is closed.
record_capture() {
  local file=$1 frames=320000 port
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  rm -f "$file"
  target/release/kvscope demo --listen "127.0.0.1:$port" --scenario sglang-tiers --workers 16 --rate 2000 --batches 20000 \
    --no-event-plane --record "$file" >"$RUN/record.log" 2>&1 &
  local demo=$! n=0
  for _ in $(seq 300); do
    sleep 1
    n=$(curl -sf "http://127.0.0.1:$port/metrics" | awk '/^kvscope_frames_total/ { s += $2 } END { print s + 0 }')
    [ "$n" -ge "$frames" ] && break
  done
  kill -INT "$demo"; wait "$demo" || true
  [ "$n" -ge "$frames" ] || { echo "[bench-engine] the demo recorded $n of $frames frames; see $RUN/record.log" >&2; exit 1; }
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
  record_capture "$RUN/capture16.kvcap"
  KVSCOPE_BIN="$ROOT/target/release/kvscope" KVSCOPE_BENCH_CAPTURE="$ROOT/$RUN/capture16.kvcap" \
    cargo bench -p kvscope-e2e --bench browser >"$RUN/capture.log" 2>&1 \
    || { tail -40 "$RUN/capture.log"; echo "[bench-engine] the capture bench failed; see $RUN/capture.log" >&2; exit 1; }
  rm -f "$RUN/capture16.kvcap"
  echo "load=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$RUN/run.txt"
fi
python3 scripts/bench_engine_report.py "$RUN"
