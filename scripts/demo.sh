#!/usr/bin/env bash
# Starts the kvscope dashboard on a built-in demo fleet (the Kimi-K3 incident by default) on a
# fresh machine: installs the pinned tools, builds the dashboard and the server, then runs
# `kvscope demo` and prints the URL. Extra arguments go to `kvscope demo`
# (e.g. `scripts/demo.sh --scenario sglang-tiers`).
set -euo pipefail
cd "$(dirname "$0")/.."
# The dashboard needs no browser to build; skip Chromium only if the caller asks.
scripts/install-tools.sh
export PATH="$HOME/.cargo/bin:$PATH"
scripts/build-web.sh
KVSCOPE_REQUIRE_WEB=1 cargo build --release -p kvscope
exec target/release/kvscope demo "$@"
