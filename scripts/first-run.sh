#!/usr/bin/env bash
# A newcomer's first minutes, measured: clones this repository (its committed HEAD) into a
# temporary directory, points CARGO_HOME at an empty temporary directory (the Rust toolchain
# itself stays where rustup put it), and runs the README's commands there, printing each step's
# time as scripts/demo.sh reports it.
#
#   scripts/first-run.sh            the demo command: until `kvscope demo` prints its URL
#   scripts/first-run.sh test       then the test command too (scripts/test.sh, with the tools
#                                   the demo step left in the temporary CARGO_HOME)
#
# Debian's packages and the peers' virtualenv are machine-wide and are not removed first: on a
# fresh machine add about a minute and a half for them. Prints `FIRST-RUN {json}` lines.
set -euo pipefail
cd "$(dirname "$0")/.."
want=${1:-demo}
work=$(mktemp -d /tmp/kvscope-first-run.XXXXXX)
export CARGO_HOME="$work/cargo-home"
mkdir -p "$CARGO_HOME"
# rustup's shims live in the old CARGO_HOME; keep them on PATH behind the new bin dir.
export PATH="$CARGO_HOME/bin:$HOME/.cargo/bin:$PATH"
export RUSTUP_HOME=${RUSTUP_HOME:-$HOME/.rustup}
git clone --quiet . "$work/kvscope"
cd "$work/kvscope"
log="$work/demo.log"
started=$(date +%s)
scripts/demo.sh --listen 127.0.0.1:0 >"$log" 2>&1 &
demo=$!
while ! grep -q "^listening on http" "$log"; do
  if ! kill -0 "$demo" 2>/dev/null; then
    cat "$log" >&2
    echo "first-run: scripts/demo.sh stopped before printing its URL" >&2
    exit 1
  fi
  sleep 1
done
total=$(($(date +%s) - started))
kill -INT "$demo" 2>/dev/null || true
wait "$demo" 2>/dev/null || true
# demo.sh's own step lines: "==> [  12 s] 2/3 ..."
grep '^==> \[' "$log" | sed 's/^==> //' >&2
steps=$(grep '^==> \[' "$log" | sed -E 's/^==> \[ *([0-9]+) s\] (.*)$/{"at_s":\1,"step":"\2"}/' | paste -sd, -)
printf 'FIRST-RUN {"command":"scripts/demo.sh","to_url_s":%s,"steps":[%s],"cpu":"%s","cores":%s}\n' \
  "$total" "$steps" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" "$(nproc)"
if [ "$want" = test ]; then
  t0=$(date +%s)
  scripts/test.sh >"$work/test.log" 2>&1 || { tail -40 "$work/test.log" >&2; echo "first-run: scripts/test.sh failed" >&2; exit 1; }
  printf 'FIRST-RUN {"command":"scripts/test.sh","s":%s,"result":"%s"}\n' "$(($(date +%s) - t0))" "$(tail -1 "$work/test.log")"
fi
rm -rf "$work"
