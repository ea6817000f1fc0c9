#!/usr/bin/env bash
# Runs every kvscope test on a fresh machine: installs the pinned tools, builds the dashboard,
# then runs the native tests, a short fuzzing pass, the headless-Chromium wasm tests and the
# end-to-end tests.
#
#   scripts/test.sh            everything (what CI runs)
#   scripts/test.sh --quick    native cargo tests and the Python script tests only (no browser,
#                              no tool installs)
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
[ "${1:-}" = "--quick" ] && quick=1

# Each step prints the time since the start, and the run closes with every step's own time (also
# when a step fails), so a slow step names itself: "==> [ 312 s] native tests (workspace)".
started=$SECONDS
step_name=""
step_at=0
step_times=()
end_step() {
  [ -n "$step_name" ] && step_times+=("$(printf '%6d s  %s' $((SECONDS - step_at)) "$step_name")")
  step_name=""
}
step() {
  end_step
  step_name=$*
  step_at=$SECONDS
  printf '\n==> [%4d s] %s\n' "$((SECONDS - started))" "$*" >&2
}
print_step_times() {
  end_step
  [ ${#step_times[@]} -gt 0 ] || return 0
  printf '\nstep times (%d s in all):\n' "$((SECONDS - started))" >&2
  printf '%s\n' "${step_times[@]}" >&2
}
trap print_step_times EXIT

# Incremental caches only help rebuilds after edits; on a clean clone they cost gigabytes of disk.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}

# A full run writes about 5 GiB under target/ and fuzz/target/ (measured on a clean clone); with
# less than NEED_GIB free, say so up front rather than fail half an hour in with "No space left on
# device".
NEED_GIB=8
free_gib() { df -Pk . | awk 'NR == 2 { printf "%d", $4 / 1048576 }'; }
disk() { printf 'disk: %s GiB free in %s\n' "$(free_gib)" "$PWD" >&2; }

# Every test runner's output is also kept here, so the script can close with one total.
RESULTS=target/test-results.log
mkdir -p target
: >"$RESULTS"
run() { "$@" 2>&1 | tee -a "$RESULTS"; }
total() {
  # cargo test and wasm-bindgen-test both print "test result: ok. N passed; M failed; ..."; the
  # Node test of the JS package prints "N passed, M failed" alone on a line.
  awk '/test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
       /^[0-9]+ passed, [0-9]+ failed$/ { p += $1; f += $3 }
       END { printf "%d passed, %d failed\n", p, f }' "$RESULTS"
}

if [ "$quick" = 1 ]; then
  step "native tests"
  run cargo test --workspace --exclude kvscope-e2e
  python3 scripts/test_bench_report.py
  total
  exit 0
fi

disk
if [ "$(free_gib)" -lt "$NEED_GIB" ]; then
  echo "warning: fewer than $NEED_GIB GiB free here; the build may run out of disk (free some, e.g. cargo clean in other checkouts)" >&2
fi

step "installing tools (pinned; skipped when present)"
scripts/install-tools.sh test
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

step "building the dashboard (trunk, release)"
scripts/build-web.sh

step "native tests (workspace)"
# KVSCOPE_REQUIRE_WEB makes the server build fail, naming the command, if dist/ were missing.
KVSCOPE_REQUIRE_WEB=1 run cargo test --workspace --exclude kvscope-e2e

step "format: cargo fmt --check (rustfmt.toml: 140 columns)"
cargo fmt --all --check

step "lints: clippy on every target, warnings are errors (no unwrap/expect outside tests)"
# The page's test hooks on, so that its component tests are linted too.
cargo clippy --workspace --all-targets --features kvscope-web/test-hooks -- -D warnings

step "scripts: bench_report.py (BENCHMARKS.md) on a made-up run (Python unittest, standard library)"
python3 scripts/test_bench_report.py

step "fuzzing: every cargo-fuzz target for 25 s from the fixture seeds (scripts/fuzz.sh)"
# About 75 s two at a time plus the fuzz build (100 s); fails on any crash, naming the saved
# input. In 25 s each target runs 0.6-3 million inputs from the seeds (measured on 2 cores);
# longer runs are for scripts/fuzz.sh by hand.
scripts/fuzz.sh "${KVSCOPE_FUZZ_SECONDS:-25}"

step "browser-side crates: no Instant::now, threads, std::fs or unwrap on wasm32 (clippy)"
CLIPPY_CONF_DIR=scripts/clippy_wasm cargo clippy --target wasm32-unknown-unknown \
  -p kvscope-wire -p kvscope-normalize -p kvscope-tiers -p kvscope-router -p kvscope-index -p kvscope-protocol -p kvscope-wasm \
  -p kvscope-engine-protocol -p kvscope-engine -p kvscope-web \
  -- -D warnings

# The wasm test runner prefers geckodriver when one is on PATH; name chromedriver explicitly.
export CHROMEDRIVER=/usr/bin/chromedriver
export WASM_BINDGEN_TEST_TIMEOUT=${WASM_BINDGEN_TEST_TIMEOUT:-300}

step "normalizer vectors and corpus in headless Chromium (wasm-pack)"
run wasm-pack test --headless --chrome --release crates/kvscope-wasm

step "the JS package: wasm-pack build --target web and --target nodejs (offline), then Node classifies the Kimi-K3 stream"
js_pkg="$PWD/target/js-pkg"
wasm-pack build crates/kvscope-wasm --release --target web --out-dir "$js_pkg/web"
wasm-pack build crates/kvscope-wasm --release --target nodejs --out-dir "$js_pkg/nodejs"
test -f "$js_pkg/web/kvscope_wasm.js" && test -f "$js_pkg/web/kvscope_wasm_bg.wasm"
run node crates/kvscope-wasm/tests/node/classify_kimi_k3.cjs "$js_pkg/nodejs" tests/fixtures/kv-events

if [ -d web/tests ]; then
  step "dashboard component tests in headless Chromium (wasm-pack)"
  run wasm-pack test --headless --chrome --release web --features test-hooks
fi

step "end-to-end: real ZMQ, real WebSocket, real Chromium"
# Against the server binary the native tests built (dev profile, the core crates optimised, with
# dist/ embedded): the tests check behaviour, not speed, and a release build of the server was
# another 4 minutes of compiling on 2 cores.
e2e_bin="$PWD/target/debug/kvscope"
[ -x "$e2e_bin" ] || { echo "test.sh: the native tests did not build $e2e_bin" >&2; exit 1; }
KVSCOPE_BIN="$e2e_bin" run cargo test -p kvscope-e2e -- --test-threads=1

step "end-to-end with the engine over two workers (?engines=2): check --json, captures, a restart"
# The page's engine spread over two engine workers (the coordinator's rounds between them):
# the tests that hold the page to `kvscope check --json` under both policies, from a replay, a
# capture opened in the page and across a server restart.
KVSCOPE_E2E_ENGINES=2 KVSCOPE_BIN="$e2e_bin" run cargo test -p kvscope-e2e -- --test-threads=1 \
  replay_of_the_kimi_capture_matches_check_under_both_policies demo_fleet_matches_check_on_its_own_recording \
  page_reconnects_after_a_server_restart_without_double_counting a_capture_opens_in_the_page_with_no_server \
  a_dropped_capture_downloads_back_to_the_same_verdicts the_inspector_fetches_the_raw_bytes_the_page_dropped_from_the_servers_history

end_step
printf '\n==> [%4d s] all tests passed\n' "$((SECONDS - started))" >&2
trap - EXIT
print_step_times
disk
total
