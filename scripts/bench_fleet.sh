#!/usr/bin/env bash
# The dashboard at fleet scale (issue 8), every figure from this one run, written into
# BENCHMARKS.md as section "5. The dashboard at fleet scale" (scripts/bench_report.py carries the
# section over when the other tables are re-measured).
#
#   scripts/bench_fleet.sh                                 # about 35 minutes on 2 cores
#   KVSCOPE_FLEET_SOAK_SECONDS=300 scripts/bench_fleet.sh  # a shorter sustained run
#   KVSCOPE_FLEET_REPORT_ONLY=1 scripts/bench_fleet.sh     # rewrite the section from the last run
#
# Steps (logs in target/bench-run/fleet/):
#   1. the dashboard: scripts/build-web.sh, then `cargo build --release -p kvscope` (embeds dist/);
#   2. the app's size: as built, with wasm-opt -Oz (binaryen from npm, pinned; not what is
#      served, see index.html), gzip -9, and what the server sends with Accept-Encoding br / gzip;
#   3. the browser bench (tests/e2e/browser_bench.rs) at three fleets of small SGLang events
#      (`demo --scenario sglang-tiers`), each with the router side on (the default demo: a
#      simulated Dynamo relay per worker, the event plane, the router's index) and off
#      (`--no-event-plane`): 64 workers x 300 batches/s for KVSCOPE_FLEET_SOAK_SECONDS (default
#      600: the memory figures are the ten-minute ones, router side off), 256 workers x 20/s and
#      64 workers x 8 DP ranks x 20/s for 60 s each;
#   4. the section, from scripts/bench_fleet_report.py.
# Needs what scripts/install-tools.sh installs (trunk, wasm-bindgen, chromium, chromedriver) and npm.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
RUN=target/bench-run/fleet
mkdir -p "$RUN"
log() { printf '[bench-fleet] %s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
SOAK=${KVSCOPE_FLEET_SOAK_SECONDS:-600}
BINARYEN_VERSION=132.0.0

if [ "${KVSCOPE_FLEET_REPORT_ONLY:-0}" != 1 ]; then
  rm -f "$RUN"/*.log "$RUN"/sizes.txt "$RUN"/run.txt
  echo "date=$(date -u +%Y-%m-%dT%H:%MZ)" >"$RUN/run.txt"
  echo "soak_seconds=$SOAK" >>"$RUN/run.txt"
  {
    echo "cores=$(nproc)"
    echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
    echo "chromium=$(chromium --version 2>/dev/null || echo none)"
    echo "commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  } >>"$RUN/run.txt"

  log "1/4 dashboard build"
  scripts/build-web.sh >"$RUN/build-web.log" 2>&1 || { tail -30 "$RUN/build-web.log"; exit 1; }
  KVSCOPE_REQUIRE_WEB=1 cargo build --release -p kvscope >"$RUN/kvscope-build.log" 2>&1 \
    || { tail -30 "$RUN/kvscope-build.log"; exit 1; }

  log "2/4 the app's size: the page's wasm and the engine worker's"
  BINARYEN_DIR=${KVSCOPE_BINARYEN_DIR:-$HOME/.cache/kvscope/binaryen}
  WASM_OPT="$BINARYEN_DIR/node_modules/.bin/wasm-opt"
  if [ ! -x "$WASM_OPT" ] || ! grep -q "\"version\": \"$BINARYEN_VERSION\"" "$BINARYEN_DIR/node_modules/binaryen/package.json" 2>/dev/null; then
    mkdir -p "$BINARYEN_DIR"
    npm install --silent --no-audit --no-fund --prefix "$BINARYEN_DIR" "binaryen@$BINARYEN_VERSION" >"$RUN/binaryen.log" 2>&1
  fi
  # Each app: its wasm and JS glue (the page's names carry a hash, the worker's do not).
  apps() { echo "page $(ls dist/kvscope-web-*_bg.wasm | head -1) $(ls dist/kvscope-web-*.js | head -1)"; \
           echo "engine dist/kvscope-engine_bg.wasm dist/kvscope-engine.js"; }
  {
    echo "binaryen=$BINARYEN_VERSION"
    apps | while read -r app WASM JS; do
      echo "${app}_wasm=$(stat -c %s "$WASM")"
      echo "${app}_wasm_gzip=$(gzip -9 -c "$WASM" | wc -c)"
      echo "${app}_js=$(stat -c %s "$JS")"
      start=$(date +%s)
      # rustc's wasm32 target emits post-MVP features (bulk memory, reference types, ...).
      "$WASM_OPT" -Oz --all-features "$WASM" -o "$RUN/$app-oz.wasm"
      echo "${app}_wasm_oz=$(stat -c %s "$RUN/$app-oz.wasm")"
      echo "${app}_wasm_oz_gzip=$(gzip -9 -c "$RUN/$app-oz.wasm" | wc -c)"
      echo "${app}_wasm_oz_seconds=$(($(date +%s) - start))"
    done
  } >"$RUN/sizes.txt"
  PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  target/release/kvscope demo --listen "127.0.0.1:$PORT" --workers 1 >"$RUN/serve.log" 2>&1 &
  SERVER=$!
  trap 'kill $SERVER 2>/dev/null || true' EXIT
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/" >/dev/null && break; sleep 0.2; done
  {
    apps | while read -r app WASM JS; do
      for enc in br gzip; do
        echo "${app}_served_wasm_$enc=$(curl -sf -H "Accept-Encoding: $enc" "http://127.0.0.1:$PORT/$(basename "$WASM")" | wc -c)"
        echo "${app}_served_js_$enc=$(curl -sf -H "Accept-Encoding: $enc" "http://127.0.0.1:$PORT/$(basename "$JS")" | wc -c)"
      done
    done
  } >>"$RUN/sizes.txt"
  kill $SERVER 2>/dev/null || true
  trap - EXIT

  log "3/4 browser: 64 x 300/s for $SOAK s, 256 x 20/s, 64 x 8 ranks x 20/s; router side off, then on"
  # bench NAME ROUTER(off|on) ENV...: one fleet; its log is NAME.log off, NAME-router.log on.
  bench() {
    local name=$1 router=$2; shift 2
    local plane=(KVSCOPE_BENCH_NO_PLANE=1)
    if [ "$router" = on ]; then name="$name-router"; plane=(); fi
    env KVSCOPE_BIN="$ROOT/target/release/kvscope" KVSCOPE_BENCH_SCENARIO=sglang-tiers "${plane[@]}" \
      KVSCOPE_BENCH_SOAK_ALWAYS=1 "$@" cargo bench -p kvscope-e2e --bench browser >"$RUN/$name.log" 2>&1 \
      || { tail -30 "$RUN/$name.log"; log "the browser bench failed; see $RUN/$name.log"; exit 1; }
  }
  for router in off on; do
    log "   router side $router"
    bench 64x300 "$router" KVSCOPE_BENCH_WORKERS=64 KVSCOPE_BENCH_RATES=300 KVSCOPE_BENCH_STEP_SECONDS=20 KVSCOPE_BENCH_SOAK_SECONDS="$SOAK"
    bench 256x20 "$router" KVSCOPE_BENCH_WORKERS=256 KVSCOPE_BENCH_RATES=20 KVSCOPE_BENCH_STEP_SECONDS=20 KVSCOPE_BENCH_SOAK_SECONDS=60
    bench 512-sources "$router" KVSCOPE_BENCH_WORKERS=64 KVSCOPE_BENCH_DP_RANKS=8 KVSCOPE_BENCH_RATES=20 KVSCOPE_BENCH_STEP_SECONDS=20 \
      KVSCOPE_BENCH_SOAK_SECONDS=60
  done
fi

log "4/4 BENCHMARKS.md section 5"
python3 scripts/bench_fleet_report.py "$RUN"
log "done"
