#!/usr/bin/env bash
# Starts the kvscope dashboard on a built-in demo fleet (the Kimi-K3 incident by default) on a
# fresh machine: installs only what the demo needs (scripts/install-tools.sh demo), builds the
# dashboard and the server, then runs `kvscope demo` and prints the URL. Extra arguments go to
# `kvscope demo` (e.g. `scripts/demo.sh --scenario sglang-tiers`).
#
# Each step says what it does and about how long it takes the first time on a 2-core machine;
# a second run finds everything built and starts in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

started=$(date +%s)
step() { printf '\n==> [%3d s] %s\n' "$(($(date +%s) - started))" "$*" >&2; }

step "1/3 tools: trunk and wasm-bindgen-cli, built once into ${CARGO_HOME:-~/.cargo}/bin (first time: about 5 min on 2 cores; then instant)"
scripts/install-tools.sh demo
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

step "2/3 the dashboard: the page and its engine worker, compiled to wasm with Trunk (first time: about 3 min; then seconds)"
scripts/build-web.sh

step "3/3 the server, which embeds the dashboard (first time: about 3 min; then seconds)"
KVSCOPE_REQUIRE_WEB=1 cargo build --release -p kvscope

step "starting the demo fleet; open the URL it prints"
exec target/release/kvscope demo "$@"
