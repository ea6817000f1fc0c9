#!/usr/bin/env bash
# The router's index model's three costs (issue 21), every figure against a baseline measured in
# this one run, written into BENCHMARKS.md as section "6. The router's index" (bench_report.py
# carries the section over when the other tables are re-measured).
#
#   scripts/bench_index.sh                               # about 6 minutes on 2 cores, after a build
#   KVSCOPE_INDEX_CPU_SECONDS=60 scripts/bench_index.sh  # a longer CPU sample each way
#   KVSCOPE_INDEX_REPORT_ONLY=1 scripts/bench_index.sh   # rewrite the section from the last run
#
# Steps (logs in target/bench-run/index/):
#   1. criterion (crates/kvscope-index/benches/index.rs): events/s of normalize + index (one
#      policy, and policies A and B) against normalize alone, on the Kimi-K3 corpus stream and a
#      synthetic 16-worker fleet; a report's walk; then the bytes per block of Dynamo's index
#      as modelled against kvscope's tier tree (RSS, 1 M blocks each);
#   2. the server's CPU at 64 workers with a real Dynamo 1.6.1 indexer's /dump polled
#      (`serve --router-index`) against not polled (scripts/bench_router_index.sh);
#   3. the section, from scripts/bench_index_report.py.
# Needs the peers' virtualenv (scripts/install-tools.sh test) and a release build with the
# dashboard (built here when missing).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
RUN=target/bench-run/index
mkdir -p "$RUN"
log() { printf '[bench-index] %s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
CPU_SECONDS=${KVSCOPE_INDEX_CPU_SECONDS:-30}
INTERVAL=${KVSCOPE_INDEX_INTERVAL:-1s}

if [ "${KVSCOPE_INDEX_REPORT_ONLY:-0}" != 1 ]; then
  rm -f "$RUN"/*.log "$RUN"/run.txt
  rm -rf target/criterion/index_kimi_k3 target/criterion/index_fleet16
  {
    echo "date=$(date -u +%Y-%m-%dT%H:%MZ)"
    echo "cores=$(nproc)"
    echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
    echo "commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  } >"$RUN/run.txt"

  log "1/3 criterion: normalize against normalize + index; bytes per block"
  cargo bench -p kvscope-index --bench index >"$RUN/index.log" 2>&1 \
    || { tail -40 "$RUN/index.log"; log "the index bench failed; see $RUN/index.log"; exit 1; }

  log "2/3 the server's CPU at 64 workers, /dump polled every $INTERVAL against not polled (${CPU_SECONDS} s each)"
  [ -d dist ] || scripts/build-web.sh >"$RUN/build-web.log" 2>&1
  cargo build --release -p kvscope >"$RUN/kvscope-build.log" 2>&1 \
    || { tail -40 "$RUN/kvscope-build.log"; log "cargo build --release -p kvscope failed"; exit 1; }
  scripts/bench_router_index.sh "$CPU_SECONDS" "$INTERVAL" >"$RUN/router-index.log" 2>&1 \
    || { tail -40 "$RUN/router-index.log"; log "the router-index CPU bench failed; see $RUN/router-index.log"; exit 1; }
  echo "load=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$RUN/run.txt"
fi

log "3/3 BENCHMARKS.md, section 6"
python3 scripts/bench_index_report.py "$RUN"
