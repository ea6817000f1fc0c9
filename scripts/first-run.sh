#!/usr/bin/env bash
# A newcomer's first minutes, measured: clones this repository (its committed HEAD) into a
# temporary directory and runs the README's commands there, printing each step's time as the
# scripts themselves report it.
#
#   scripts/first-run.sh demo   scripts/demo.sh until `kvscope demo` prints its URL, with
#                               CARGO_HOME pointing at an empty temporary directory (the Rust
#                               toolchain itself stays where rustup put it): every crate is
#                               downloaded and every tool built, as on a fresh machine
#   scripts/first-run.sh test   scripts/test.sh in a second fresh clone (an empty target
#                               directory), with the machine's own CARGO_HOME: the tools as a
#                               developer has them once installed (the run installs any missing,
#                               and its "installing tools" step says how long that took)
#   scripts/first-run.sh        both, demo first
#
# Debian's packages and the peers' virtualenv are machine-wide and are not removed first: on a
# fresh machine add about a minute and a half for them. Prints `FIRST-RUN {json}` lines and keeps
# them, with each command's log, in KVSCOPE_FIRST_RUN_OUT (default target/bench-run/first-run),
# which scripts/first_run_report.py turns into BENCHMARKS.md's section 8.
set -euo pipefail
cd "$(dirname "$0")/.."
want=${1:-both}
case "$want" in demo | test | both) ;; *) echo "usage: scripts/first-run.sh [demo|test]" >&2; exit 2 ;; esac

out=${KVSCOPE_FIRST_RUN_OUT:-$PWD/target/bench-run/first-run}
mkdir -p "$out"
repo=$PWD
work=$(mktemp -d /tmp/kvscope-first-run.XXXXXX)
machine_cargo_bin=${CARGO_HOME:-$HOME/.cargo}/bin
trap 'rm -rf "$work"' EXIT
commit=$(git rev-parse --short HEAD)
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
record() { printf 'FIRST-RUN %s\n' "$1" | tee -a "$out/first-run.log"; }
: >"$out/first-run.log"
record "$(printf '{"what":"run","commit":"%s","date":"%s","cpu":"%s","cores":%s}' \
  "$commit" "$(date -u +%Y-%m-%dT%H:%MZ)" "$cpu" "$(nproc)")"

# Step lines as the scripts print them, "==> [  12 s] 2/3 ...", as JSON: {"at_s":12,"step":"..."}.
steps_json() { grep -E '^==> \[ *[0-9]+ s\]' "$1" | sed -E 's/^==> \[ *([0-9]+) s\] (.*)$/{"at_s":\1,"step":"\2"}/' | paste -sd, -; }

if [ "$want" != test ]; then
  (
    export CARGO_HOME="$work/cargo-home"
    mkdir -p "$CARGO_HOME"
    # rustup's proxies (cargo, rustc, ...) live in the machine's CARGO_HOME beside the tools a
    # developer installed there; only the proxies come along, so the new CARGO_HOME's tools are
    # built from nothing, as on a fresh machine.
    old_bin=$machine_cargo_bin
    mkdir -p "$work/rustup-bin"
    for proxy in cargo cargo-clippy cargo-fmt clippy-driver rustc rustdoc rustfmt rustup; do
      [ -e "$old_bin/$proxy" ] && ln -s "$old_bin/$proxy" "$work/rustup-bin/$proxy"
    done
    PATH=$(printf '%s' "$PATH" | tr ':' '\n' | grep -vxF "$old_bin" | paste -sd: -)
    export PATH="$CARGO_HOME/bin:$work/rustup-bin:$PATH"
    export RUSTUP_HOME=${RUSTUP_HOME:-$HOME/.rustup}
    git clone --quiet "$repo" "$work/demo"
    cd "$work/demo"
    log="$out/demo.log"
    started=$(date +%s)
    scripts/demo.sh --listen 127.0.0.1:0 >"$log" 2>&1 &
    demo=$!
    while ! grep -q "^listening on http" "$log"; do
      if ! kill -0 "$demo" 2>/dev/null; then
        tail -40 "$log" >&2
        echo "first-run: scripts/demo.sh stopped before printing its URL" >&2
        exit 1
      fi
      sleep 1
    done
    total=$(($(date +%s) - started))
    kill -INT "$demo" 2>/dev/null || true
    wait "$demo" 2>/dev/null || true
    grep '^==> \[' "$log" | sed 's/^==> //' >&2
    record "$(printf '{"what":"demo","commit":"%s","command":"scripts/demo.sh","to_url_s":%s,"steps":[%s]}' "$commit" "$total" "$(steps_json "$log")")"
  )
fi

if [ "$want" != demo ]; then
  git clone --quiet "$repo" "$work/test"
  cd "$work/test"
  log="$out/test.log"
  started=$(date +%s)
  rc=0
  scripts/test.sh >"$log" 2>&1 || rc=$?
  total=$(($(date +%s) - started))
  # test.sh closes with "step times": one "   123 s  name" line per step.
  steps=$(awk '/^step times/ { on = 1; next } on && /^ *[0-9]+ s  / { n = $1; sub(/^ *[0-9]+ s  /, ""); gsub(/"/, "\\\""); printf "%s{\"s\":%s,\"step\":\"%s\"}", sep, n, $0; sep = ","; next } on && !/^ *[0-9]+ s  / { on = 0 }' "$log")
  result=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1 || true)
  record "$(printf '{"what":"test","commit":"%s","command":"scripts/test.sh","s":%s,"exit":%s,"result":"%s","steps":[%s]}' "$commit" "$total" "$rc" "$result" "$steps")"
  [ "$rc" = 0 ] || { tail -40 "$log" >&2; echo "first-run: scripts/test.sh failed (exit $rc); its log: $log" >&2; exit 1; }
fi
