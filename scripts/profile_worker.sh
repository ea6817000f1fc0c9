#!/usr/bin/env bash
# Where the page's engine worker spends its time on a live fleet, by Rust function: the browser
# bench (tests/e2e/browser_bench.rs) with V8 naming the wasm functions it compiles for perf
# (`--js-flags=--perf-basic-prof`), recorded system-wide by perf while the step is measured, and
# read by scripts/profile_worker.py (the threads' shares, the worker's functions by inclusive
# share, and the callees of the functions named with --children).
#
#   scripts/profile_worker.sh                     # 64 sglang-tiers workers x 300/s, router side on
#   scripts/profile_worker.sh --children kvscope_index::model::IndexModel::push_decoded
#   KVSCOPE_PROFILE_WORKERS=256 KVSCOPE_PROFILE_RATE=20 scripts/profile_worker.sh
#   KVSCOPE_BENCH_NO_PLANE=1 scripts/profile_worker.sh          # router side off
#
# KVSCOPE_PROFILE_SECONDS (default 15) is how long perf records, after the fleet connected and
# the page warmed up. Needs perf (system-wide cpu-clock sampling), the dashboard built and a
# release kvscope embedding it (scripts/build-web.sh, then cargo build --release -p kvscope),
# chromium and chromedriver. Writes target/bench-run/profile-worker.{txt,script,data,log}; other
# functions' callees from the same run: python3 scripts/profile_worker.py --children NAME
# <target/bench-run/profile-worker.script (the .data alone has lost the wasm names).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
RUN=target/bench-run
mkdir -p "$RUN"
RECORD=${KVSCOPE_PROFILE_SECONDS:-15}
BIN=${KVSCOPE_BIN:-$ROOT/target/release/kvscope}
[ -x "$BIN" ] || { echo "no $BIN: build the dashboard, then cargo build --release -p kvscope" >&2; exit 1; }
command -v perf >/dev/null || { echo "perf is not installed (Debian: linux-perf)" >&2; exit 1; }

# V8 writes its isolate logs into the working directory, and one map per process into /tmp.
SCRATCH=$(mktemp -d)
MAPS_BEFORE=$(ls /tmp/perf-*.map 2>/dev/null || true)
cleanup() {
  rm -rf "$SCRATCH"
  for map in /tmp/perf-*.map; do
    [ -e "$map" ] && ! grep -qxF "$map" <<<"$MAPS_BEFORE" && rm -f "$map"
  done
  return 0
}
trap cleanup EXIT

LOG="$RUN/profile-worker.log"
echo "[profile-worker] the browser bench, ${KVSCOPE_PROFILE_WORKERS:-64} x ${KVSCOPE_PROFILE_RATE:-300}/s; log: $LOG" >&2
# The step outlasts the recording; the sustained run after it (if the step passed) is 1 s.
(cd "$SCRATCH" && env KVSCOPE_BIN="$BIN" KVSCOPE_BENCH_SCENARIO="${KVSCOPE_PROFILE_SCENARIO:-sglang-tiers}" \
  KVSCOPE_BENCH_WORKERS="${KVSCOPE_PROFILE_WORKERS:-64}" KVSCOPE_BENCH_RATES="${KVSCOPE_PROFILE_RATE:-300}" \
  KVSCOPE_BENCH_STEP_SECONDS=$((RECORD + 30)) KVSCOPE_BENCH_SOAK_SECONDS=1 \
  KVSCOPE_CHROME_ARGS="--js-flags=--perf-basic-prof,--logfile=/dev/null,--no-logfile-per-isolate ${KVSCOPE_CHROME_ARGS:-}" \
  cargo bench --manifest-path "$ROOT/Cargo.toml" -p kvscope-e2e --bench browser) >"$LOG" 2>&1 &
BENCH=$!

for _ in $(seq 1 600); do
  grep -q "connected source" "$LOG" 2>/dev/null && break
  kill -0 "$BENCH" 2>/dev/null || { tail -20 "$LOG"; echo "[profile-worker] the bench ended before the fleet connected" >&2; exit 1; }
  sleep 1
done
# The page loads and warms up (the bench measures from the end of its warm-up).
sleep 25
echo "[profile-worker] recording ${RECORD} s" >&2
perf record -a -F 499 -g -o "$RUN/profile-worker.data" -- sleep "$RECORD" >/dev/null 2>&1
wait "$BENCH" || { tail -20 "$LOG"; echo "[profile-worker] the bench failed; see $LOG" >&2; exit 1; }
grep '"kind":"step"' "$LOG" | head -1 >&2 || true
# Symbolized now, while V8's maps exist (they go with the run): the text is what later questions read.
perf script -i "$RUN/profile-worker.data" >"$RUN/profile-worker.script" 2>/dev/null
python3 scripts/profile_worker.py "$@" <"$RUN/profile-worker.script" | tee "$RUN/profile-worker.txt"
