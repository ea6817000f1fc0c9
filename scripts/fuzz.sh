#!/usr/bin/env bash
# Fuzzes kvscope's decoders with libFuzzer (cargo-fuzz targets in fuzz/, see fuzz/README.md).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]    default: 60 s each, every target
#
# Writes the seed corpora from the fixtures (fuzz/seeds.py), builds the targets, runs them side
# by side (one libFuzzer process per core, KVSCOPE_FUZZ_JOBS to change it; each target still gets
# its full time) and prints per target the executions, the final
# coverage (libFuzzer's `cov:` edges and `ft:` features), the corpus size and the crashes.
# Exits non-zero if any target crashed, hung or ran out of memory; the input is then in
# fuzz/artifacts/<target>/ and the log in fuzz/artifacts/<target>.log.
#
# Works on stable Rust: cargo-fuzz's -Z flags are let through with RUSTC_BOOTSTRAP=1, and
# `-s none` builds without a sanitizer (the crates forbid unsafe code; panics, overflow
# checks, debug assertions and allocation limits are what the fuzzer catches).
# KVSCOPE_FUZZ_TARGET_DIR overrides the build directory (default fuzz/target).
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-60}
shift || true
all=(decode_batch frames protocol_decode kvcap_reader router_plane engine_messages)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")

# The longest input each target tries; fuzz/seeds.py leaves out seeds above the same bounds.
declare -A max_len=([decode_batch]=16384 [frames]=16384 [protocol_decode]=4096 [kvcap_reader]=32768 [router_plane]=8192 [engine_messages]=4096)

log() { printf '[fuzz] %s\n' "$*" >&2; }

export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
cargo fuzz --version >/dev/null 2>&1 || { log "cargo-fuzz is missing: run scripts/install-tools.sh"; exit 2; }
export RUSTC_BOOTSTRAP=1
export CARGO_TARGET_DIR=${KVSCOPE_FUZZ_TARGET_DIR:-$PWD/fuzz/target}

python3 fuzz/seeds.py
build_start=$SECONDS
mkdir -p fuzz/artifacts
cargo fuzz build -s none >fuzz/artifacts/build.log 2>&1 || { log "build failed:"; tail -n 40 fuzz/artifacts/build.log >&2; exit 1; }
log "built in $((SECONDS - build_start)) s"

count_artifacts() { find "fuzz/artifacts/$1" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' -o -name 'leak-*' \) 2>/dev/null | wc -l; }

# One target: runs it, logs its figures, and leaves its summary line in fuzz/artifacts/T.summary
# and, when it crashed, hung or ran out of memory, a fuzz/artifacts/T.failed marker.
fuzz_one() {
  local t=$1 out="fuzz/artifacts/$1.log" before rc=0 crashes status execs rate line
  mkdir -p "fuzz/artifacts/$t"
  rm -f "fuzz/artifacts/$t.failed"
  before=$(count_artifacts "$t")
  log "$t: ${secs} s, -max_len=${max_len[$t]}"
  cargo fuzz run -s none "$t" "fuzz/corpus/$t" -- \
    -max_total_time="$secs" -rss_limit_mb=2048 -max_len="${max_len[$t]}" -timeout=10 \
    -print_final_stats=1 >"$out" 2>&1 || rc=$?
  crashes=$(( $(count_artifacts "$t") - before ))
  # The last status line (`#N DONE cov: C ft: F corp: U/S ...`) holds the final figures.
  status=$(grep -E '^#[0-9]+[[:space:]]+(DONE|NEW|REDUCE|pulse|INITED)' "$out" | tail -n 1 || true)
  field() { sed -nE "s/.*[[:space:]]$1:? ([^ ]+).*/\1/p" <<<"$status"; }
  execs=$(sed -nE 's/^stat::number_of_executed_units:[[:space:]]+([0-9]+)/\1/p' "$out" | tail -n 1)
  rate=$(sed -nE 's/^stat::average_exec_per_sec:[[:space:]]+([0-9]+)/\1/p' "$out" | tail -n 1)
  [ -n "$execs" ] || execs=$(sed -nE 's/^#([0-9]+).*/\1/p' <<<"$status")
  line=$(printf '%-16s execs %10s  exec/s %7s  cov %5s  ft %6s  corpus %12s  crashes %s' \
    "$t" "${execs:-?}" "${rate:-?}" "$(field cov)" "$(field ft)" "$(field corp)" "$crashes")
  printf '%s\n' "$line" >"fuzz/artifacts/$t.summary"
  log "$line"
  if [ "$rc" != 0 ] || [ "$crashes" != 0 ]; then
    touch "fuzz/artifacts/$t.failed"
    log "$t FAILED (exit $rc); the end of $out:"
    grep -E 'panicked|ERROR: libFuzzer|SUMMARY|Test unit written|Base64' "$out" | head -n 20 >&2 || tail -n 30 "$out" >&2
    log "reproduce: RUSTC_BOOTSTRAP=1 cargo fuzz run -s none $t fuzz/artifacts/$t/<file>"
    log "minimize:  RUSTC_BOOTSTRAP=1 cargo fuzz tmin -s none $t fuzz/artifacts/$t/<file>  (then see fuzz/README.md)"
  fi
}

for t in "${targets[@]}"; do
  [ -n "${max_len[$t]:-}" ] || { log "unknown target $t (targets: ${all[*]})"; exit 2; }
done
# libFuzzer runs on one core; with more, targets run side by side, each for its full time.
jobs_max=${KVSCOPE_FUZZ_JOBS:-$(nproc)}
log "${#targets[@]} targets, $jobs_max at a time"
running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$jobs_max" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  fuzz_one "$t" &
  running=$((running + 1))
done
wait

failed=0
summary=()
for t in "${targets[@]}"; do
  summary+=("$(cat "fuzz/artifacts/$t.summary" 2>/dev/null || echo "$t: no summary (the run stopped early)")")
  [ -f "fuzz/artifacts/$t.summary" ] && [ ! -f "fuzz/artifacts/$t.failed" ] || failed=1
done

printf '\nfuzz summary (%s s per target):\n' "$secs"
printf '  %s\n' "${summary[@]}"
[ "$failed" = 0 ] || { echo "fuzzing found crashes: see above" >&2; exit 1; }
