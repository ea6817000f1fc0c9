#!/usr/bin/env bash
# The server's CPU with a real router index read along (`--router-index`) against without, in
# one run on this machine: a demo fleet of 64 workers publishes real ZMQ on loopback, Dynamo
# 1.6.1's standalone indexer (`python -m dynamo.indexer`) subscribes to all of them, and
# `kvscope serve` reads the same 64 engines twice, for SECONDS each: once without, once with
# `--router-index` (its /workers and /dump every INTERVAL). The figure is the serve process's
# CPU seconds (utime + stime, /proc) per wall second, and their ratio.
#
#   scripts/bench_router_index.sh [SECONDS] [INTERVAL]      (defaults 30, 1s)
#
# Needs a release build with the dashboard (scripts/build-web.sh, cargo build --release -p
# kvscope) and the peers' virtualenv (scripts/install-tools.sh test). Prints one line
# `BENCH router_index {json}`.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-30}
INTERVAL=${2:-1s}
BIN=target/release/kvscope
PY=${KVSCOPE_PEERS:-$HOME/.cache/kvscope/peers}/venv/bin/python
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

"$BIN" demo --scenario fleet --workers 64 --rate 20 --no-event-plane --listen "127.0.0.1:$(free_port)" >"$work/demo.out" 2>"$work/demo.log" &
pids+=($!)
for _ in $(seq 100); do
  [ "$(grep -c 'connected source=' "$work/demo.log" || true)" -ge 64 ] && break
  sleep 0.1
done
workers=$(grep -o 'connected source=[0-9]*:0 endpoint=tcp://[0-9.:]*' "$work/demo.log" | sed 's/connected source=\([0-9]*\):0 endpoint=/\1=/' | sort -u | paste -sd, -)
[ "$(echo "$workers" | tr ',' '\n' | wc -l)" -eq 64 ] || { echo "the demo did not list 64 engines" >&2; exit 1; }

iport=$(free_port)
DYN_LOG=error "$PY" -m dynamo.indexer --workers "$workers" --block-size 16 --port "$iport" >"$work/indexer.log" 2>&1 &
pids+=($!)
for _ in $(seq 600); do
  n=$(curl -s "http://127.0.0.1:$iport/workers" 2>/dev/null | grep -o '"status":"active"' | wc -l || true)
  [ "${n:-0}" -ge 64 ] && break
  sleep 0.1
done

cpu() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
run() {
  local label=$1; shift
  "$BIN" serve --workers "$workers" --block-size 16 --listen "127.0.0.1:0" "$@" >"$work/$label.out" 2>"$work/$label.log" &
  local pid=$!
  pids+=($pid)
  sleep 5
  local hz c0 c1 t0 t1
  hz=$(getconf CLK_TCK)
  c0=$(cpu "$pid"); t0=$(date +%s.%N)
  sleep "$SECONDS_EACH"
  c1=$(cpu "$pid"); t1=$(date +%s.%N)
  kill -INT "$pid"; wait "$pid" 2>/dev/null || true
  awk -v a="$c0" -v b="$c1" -v hz="$hz" -v t0="$t0" -v t1="$t1" 'BEGIN { printf "%.3f", (b - a) / hz / (t1 - t0) }'
}
off=$(run off)
on=$(run on --router-index "http://127.0.0.1:$iport" --router-index-interval "$INTERVAL")
dump_bytes=$(curl -s "http://127.0.0.1:$iport/dump" | wc -c)
cpu_model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
printf 'BENCH router_index {"workers":64,"rate_per_worker":20,"seconds":%s,"interval":"%s","dump_bytes":%s,"serve_cores_off":%s,"serve_cores_on":%s,"ratio":%s,"cpu":"%s"}\n' \
  "$SECONDS_EACH" "$INTERVAL" "$dump_bytes" "$off" "$on" "$(awk -v a="$on" -v b="$off" 'BEGIN { printf "%.2f", a / b }')" "$cpu_model"
