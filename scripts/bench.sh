#!/usr/bin/env bash
# Runs every benchmark of issue 5 in one go and writes BENCHMARKS.md: decode (table 1), tier trees
# (table 2), relay (table 3) and browser ingest (table 4), each table from this one run.
#
#   scripts/bench.sh            # everything (about an hour on 2 cores, after a first build)
#   KVSCOPE_BENCH_SKIP_WASM=1 scripts/bench.sh     # without the headless-Chromium decode run
#   KVSCOPE_BENCH_SKIP_BROWSER=1 scripts/bench.sh  # without the dashboard build and run (table 4)
#   KVSCOPE_BENCH_REPORT_ONLY=1 scripts/bench.sh   # rewrite BENCHMARKS.md from the last run's results
#
# Steps (each logs to target/bench-run/<step>.log; step times go to target/bench-run/steps.txt):
#   1. the differential test against Dynamo 1.6.1 (benches/peers/tests/differential.rs);
#   2. the inputs, written for msgspec (kvscope-bench-inputs);
#   3. criterion: kvscope, Dynamo 1.6.1 and the skip-only floor, native (benches/peers/benches/decode.rs);
#   4. msgspec on the same inputs (scripts/bench_msgspec.py);
#   5. kvscope compiled to wasm in headless Chromium (benches/peers/tests/wasm_bench.rs);
#   6. a profile of kvscope's hot path (perf if it works here, else valgrind --tool=callgrind),
#      and the cursor-decoder sketch (benches/peers/examples/decoder_sketch.rs);
#   7. tier trees, 1 and 64 workers up to 1 M live blocks each, against std's HashMap
#      (crates/kvscope-tiers/benches/trees.rs; peaks at about 8 GB of RAM);
#   8. the dashboard: scripts/build-web.sh, then `cargo build --release -p kvscope` (which embeds dist/);
#   9. the relay, ZMQ in -> WebSocket out, against raw ZMQ PUB -> SUB (server/benches/relay.rs);
#  10. the dashboard's ingest in headless Chromium, 16 and 64 workers (tests/e2e/browser_bench.rs;
#      it also writes tests/artifacts/browser-bench.json and screenshots);
#  11. sections 6, 7 and 5, each by its own script (bench_index.sh, bench_engine.sh, bench_fleet.sh with a
#      60 s sustained run; KVSCOPE_BENCH_SKIP_SECTIONS=1 leaves them as they are);
#  12. BENCHMARKS.md from all of the above (scripts/bench_report.py, tested by scripts/test_bench_report.py).
# Needs: cargo, python3 with msgspec (installed with pip if missing), and for steps 5, 8 and 10
# wasm-bindgen-test-runner, trunk + wasm-bindgen and chromium + /usr/bin/chromedriver
# (scripts/install-tools.sh installs them).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
RUN=target/bench-run
INPUTS=target/bench-inputs
mkdir -p "$RUN"
log() { printf '[bench] %s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
# Step timing: `step NAME` closes the previous step (seconds and load average go to steps.txt).
STEP_NAME="" STEP_START=0
step() {
  local now; now=$(date +%s)
  [ -n "$STEP_NAME" ] && printf '%s\t%s\t%s\n' "$STEP_NAME" "$((now - STEP_START))" "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$RUN/steps.txt"
  STEP_NAME=$1 STEP_START=$now
}

# Machine facts, written at the end of a run (so that a report-only rewrite keeps the run's).
write_machine() {
  {
    echo "cores=$(nproc)"
    echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
    echo "rustc=$(rustc --version)"
    echo "python=$(python3 --version 2>&1)"
    echo "msgspec=$(python3 -c 'import msgspec; print(msgspec.__version__)')"
    echo "chromium=$(chromium --version 2>/dev/null || echo none)"
    echo "kernel=$(uname -sr)"
    echo "memory=$(awk '/MemTotal/ {printf "%.0f GB", $2 / 1048576}' /proc/meminfo)"
    echo "date=${RUN_DATE:-$(date -u +%Y-%m-%dT%H:%MZ)}"
  } >"$RUN/machine.txt"
}

if [ "${KVSCOPE_BENCH_REPORT_ONLY:-0}" != 1 ]; then
RUN_START=$(date +%s)
RUN_DATE=$(date -u +%Y-%m-%dT%H:%MZ)
: >"$RUN/steps.txt"
rm -f "$RUN/trees.log" "$RUN/relay.log" "$RUN/browser.log" "$RUN/build-web.log" "$RUN/kvscope-build.log" \
  "$RUN/run.txt" "$RUN/machine.txt" "$RUN/browser-settings.txt"
# Cargo's criterion output, per (workload, bench), is read back from target/criterion.
rm -rf target/criterion/kimi_k3 target/criterion/small_gpu target/criterion/cpu_offload target/criterion/sglang \
  target/criterion/tiers_1w_*

step differential; log "1/12 differential test against Dynamo 1.6.1"
cargo test -p kvscope-peer-bench --test differential -- --nocapture >"$RUN/differential.log" 2>&1 \
  || { tail -40 "$RUN/differential.log"; log "the differential test failed; see $RUN/differential.log"; exit 1; }

step inputs; log "2/12 benchmark inputs -> $INPUTS"
cargo run -q -p kvscope-peer-bench --release --bin kvscope-bench-inputs -- "$INPUTS" 2>"$RUN/inputs.log"

step decode; log "3/12 criterion (native kvscope, Dynamo 1.6.1, skip-only floor)"
cargo bench -p kvscope-peer-bench --bench decode >"$RUN/criterion.log" 2>&1 \
  || { tail -40 "$RUN/criterion.log"; exit 1; }

step msgspec; log "4/12 msgspec"
python3 -c 'import msgspec' 2>/dev/null || python3 -m pip install --quiet 'msgspec==0.23.0'
python3 scripts/bench_msgspec.py --check-corpus tests/fixtures/kv-events >"$RUN/msgspec-corpus.log"
python3 scripts/bench_msgspec.py "$INPUTS" >"$RUN/msgspec.log"

if [ "${KVSCOPE_BENCH_SKIP_WASM:-0}" = 1 ]; then
  step wasm; log "5/12 wasm skipped (KVSCOPE_BENCH_SKIP_WASM=1)"
  : >"$RUN/wasm.log"
else
  step wasm; log "5/12 wasm in headless Chromium"
  CHROMEDRIVER=${CHROMEDRIVER:-/usr/bin/chromedriver} \
  CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner \
  WASM_BINDGEN_TEST_TIMEOUT=300 \
    cargo test --release -p kvscope-peer-bench --target wasm32-unknown-unknown --test wasm_bench -- --nocapture \
    >"$RUN/wasm.log" 2>&1 || { tail -40 "$RUN/wasm.log"; exit 1; }
fi

step profile; log "6/12 profile of the hot path"
BENCH_BIN=$(cargo bench -p kvscope-peer-bench --bench decode --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "decode" and m.get("executable"):
        print(m["executable"])')
: >"$RUN/profile.txt"
profile() { # $1 = criterion filter, $2 = title
  local out="$RUN/perf-$(echo "$1" | tr -c 'a-z0-9' '_').data"
  if [ "${PROFILER:-}" != callgrind ] && perf record -F 1999 -g -o "$out" "$BENCH_BIN" --bench --profile-time 4 "$1" >/dev/null 2>&1; then
    { echo "### $2"; echo; echo '```'; echo "perf record -F 1999 -g ${BENCH_BIN#"$ROOT"/} --bench --profile-time 4 '$1'"
      perf report -i "$out" --no-children --stdio --percent-limit 1.5 2>/dev/null \
        | sed -n 's/^ *\([0-9.]*%\) .*\[\.\] \(.*\)$/\1  \2/p' | cut -c1-140 | head -14
      echo '```'; echo; } >>"$RUN/profile.txt"
    PROFILER=perf
  else
    local cg="$RUN/callgrind-$(echo "$1" | tr -c 'a-z0-9' '_').out"
    valgrind --tool=callgrind --callgrind-out-file="$cg" "$BENCH_BIN" --bench --profile-time 1 "$1" >/dev/null 2>&1
    { echo "### $2"; echo; echo '```'; echo "valgrind --tool=callgrind ${BENCH_BIN#"$ROOT"/} --bench --profile-time 1 '$1'"
      callgrind_annotate "$cg" 2>/dev/null | grep -E '^ *[0-9,]+ \(' | head -14 | cut -c1-140
      echo '```'; echo; } >>"$RUN/profile.txt"
    PROFILER=callgrind
  fi
}
profile 'kimi_k3/kvscope/decode\+normalize$' 'kvscope decode+normalize, kimi_k3'
profile 'small_gpu/kvscope/decode\+normalize$' 'kvscope decode+normalize, small_gpu'
profile 'kimi_k3/dynamo/decode\+normalize$' 'Dynamo 1.6.1 decode+normalize, kimi_k3'
echo "${PROFILER:-perf}" >"$RUN/profiler"
# The cursor-decoder sketch behind the proposal in "Where the time goes".
cargo run -q --release -p kvscope-peer-bench --example decoder_sketch >"$RUN/sketch.log" 2>&1

step trees; log "7/12 tier trees (criterion, then one-shot fills of 1 and 64 workers x 1 M blocks)"
cargo bench -p kvscope-tiers --bench trees >"$RUN/trees.log" 2>&1 \
  || { tail -40 "$RUN/trees.log"; log "the tier-tree bench failed; see $RUN/trees.log"; exit 1; }

# Rates per worker for the browser steps: the bench's own list (5,10,...,160) with lower rungs, so
# that 64 workers get a figure too (in earlier runs 64 workers had a task over 50 ms at 0.5 and at
# 1 batch/s per worker). Steps of 30 s instead of the bench's 15: the ingest check (at least 90% of
# the offered frames) counts whole batches, and the demo's workers publish in step, so at 0.25/s
# per worker a 15 s step saw 3 of 3.75 batches (80%) and failed on counting alone.
BROWSER_RATES=${KVSCOPE_BENCH_RATES:-0.25,0.5,1,2.5,5,10,20,40,80,160}
BROWSER_STEP_SECONDS=${KVSCOPE_BENCH_STEP_SECONDS:-30}
SKIP_BROWSER=${KVSCOPE_BENCH_SKIP_BROWSER:-0}
# Built before the relay bench so that both use the kvscope crate built once, against this dist/.
if [ "$SKIP_BROWSER" != 1 ]; then
  step build-web; log "8/12 dashboard: scripts/build-web.sh, then cargo build --release -p kvscope (embeds dist/)"
  [ -x /usr/bin/chromedriver ] \
    || { log "no /usr/bin/chromedriver: run scripts/install-tools.sh, or set KVSCOPE_BENCH_SKIP_BROWSER=1"; exit 1; }
  scripts/build-web.sh >"$RUN/build-web.log" 2>&1 \
    || { tail -40 "$RUN/build-web.log"; log "scripts/build-web.sh failed; see $RUN/build-web.log"; exit 1; }
  cargo build --release -p kvscope >"$RUN/kvscope-build.log" 2>&1 \
    || { tail -40 "$RUN/kvscope-build.log"; log "cargo build --release -p kvscope failed; see $RUN/kvscope-build.log"; exit 1; }
else
  log "8/12 dashboard build skipped (KVSCOPE_BENCH_SKIP_BROWSER=1)"
fi

step relay; log "9/12 relay: ZMQ in -> WebSocket out, against raw ZMQ PUB -> SUB"
cargo bench -p kvscope --bench relay >"$RUN/relay.log" 2>&1 \
  || { tail -40 "$RUN/relay.log"; log "the relay bench failed; see $RUN/relay.log"; exit 1; }

step browser
if [ "$SKIP_BROWSER" = 1 ]; then
  log "10/12 browser skipped (KVSCOPE_BENCH_SKIP_BROWSER=1)"
  echo "skipped: KVSCOPE_BENCH_SKIP_BROWSER=1" >"$RUN/browser.log"
else
  log "10/12 browser: dashboard ingest in headless Chromium, 16 and 64 workers (batches/s per worker: $BROWSER_RATES)"
  KVSCOPE_BIN="$ROOT/target/release/kvscope" KVSCOPE_BENCH_RATES="$BROWSER_RATES" KVSCOPE_BENCH_STEP_SECONDS="$BROWSER_STEP_SECONDS" \
    cargo bench -p kvscope-e2e --bench browser >"$RUN/browser.log" 2>&1 \
    || { tail -40 "$RUN/browser.log"; log "the browser bench failed; see $RUN/browser.log"; exit 1; }
fi
printf 'rates=%s\nstep_seconds=%s\n' "$BROWSER_RATES" "$BROWSER_STEP_SECONDS" >"$RUN/browser-settings.txt"

# Sections 5-7, each written into BENCHMARKS.md by its own script (the report below carries them over).
if [ "${KVSCOPE_BENCH_SKIP_SECTIONS:-0}" = 1 ] || [ "$SKIP_BROWSER" = 1 ]; then
  log "sections 5-7 skipped (KVSCOPE_BENCH_SKIP_SECTIONS=1 or KVSCOPE_BENCH_SKIP_BROWSER=1)"
else
  step index; log "11/12 section 6: the router's index (scripts/bench_index.sh)"
  scripts/bench_index.sh >"$RUN/section-index.log" 2>&1 || { tail -20 "$RUN/section-index.log"; exit 1; }
  step engine; log "11/12 section 7: the engine worker alone (scripts/bench_engine.sh)"
  scripts/bench_engine.sh >"$RUN/section-engine.log" 2>&1 || { tail -20 "$RUN/section-engine.log"; exit 1; }
  step fleet; log "11/12 section 5: fleet scale (scripts/bench_fleet.sh, ${KVSCOPE_FLEET_SOAK_SECONDS:-60} s sustained)"
  KVSCOPE_FLEET_SOAK_SECONDS=${KVSCOPE_FLEET_SOAK_SECONDS:-60} scripts/bench_fleet.sh >"$RUN/section-fleet.log" 2>&1 \
    || { tail -20 "$RUN/section-fleet.log"; exit 1; }
fi
step done
echo "run_seconds=$(( $(date +%s) - RUN_START ))" >"$RUN/run.txt"
write_machine
fi # KVSCOPE_BENCH_REPORT_ONLY

log "12/12 BENCHMARKS.md"
[ -f "$RUN/machine.txt" ] || write_machine

python3 scripts/bench_report.py "$RUN" "$INPUTS"
log "done: BENCHMARKS.md"
