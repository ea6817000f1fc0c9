#!/usr/bin/env bash
# Builds the dashboard (web/) into dist/ with Trunk, in release mode, without downloading
# anything: Trunk.toml pins wasm-bindgen so that Trunk uses the one on PATH, and index.html
# turns wasm-opt off. Installs nothing; scripts/install-tools.sh does that.
#
# Usage: scripts/build-web.sh            (from anywhere)
# Env:   TRUNK_ARGS  extra arguments for `trunk build` (e.g. "--offline")
set -euo pipefail
cd "$(dirname "$0")/.."

want_trunk=0.21.14
want_bindgen=$(awk '/^name = "wasm-bindgen"$/{getline; gsub(/[^0-9.]/,""); print; exit}' Cargo.lock 2>/dev/null || true)
want_bindgen=${want_bindgen:-0.2.130}

fail() { printf 'build-web: %s\n' "$*" >&2; exit 1; }

command -v trunk >/dev/null 2>&1 \
  || fail "trunk is not on PATH; run scripts/install-tools.sh (cargo install --locked trunk --version $want_trunk)"
got_trunk=$(trunk --version | awk '{print $2}')
[ "$got_trunk" = "$want_trunk" ] \
  || fail "trunk $got_trunk found, $want_trunk wanted (newer ones need a newer rustc); run: cargo install --locked trunk --version $want_trunk --force"

command -v wasm-bindgen >/dev/null 2>&1 \
  || fail "wasm-bindgen is not on PATH; run: cargo install wasm-bindgen-cli --version $want_bindgen"
got_bindgen=$(wasm-bindgen --version | awk '{print $2}')
[ "$got_bindgen" = "$want_bindgen" ] \
  || fail "wasm-bindgen $got_bindgen found, but Cargo.lock has wasm-bindgen $want_bindgen; run: cargo install wasm-bindgen-cli --version $want_bindgen --force"
grep -q "wasm_bindgen = \"$want_bindgen\"" Trunk.toml \
  || fail "Trunk.toml [tools] wasm_bindgen does not say \"$want_bindgen\" (Cargo.lock's version); update it so Trunk uses the one on PATH instead of downloading"

rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown \
  || fail "the wasm32-unknown-unknown target is missing; run: rustup target add wasm32-unknown-unknown"

# Trunk rewrites its whole output on every build. The server embeds dist/ and rebuilds when
# anything there changes, so Trunk writes to a staging directory and only files whose bytes
# changed reach dist/: an unchanged dashboard leaves dist/ untouched, and a second
# scripts/demo.sh starts without recompiling the server (about 30 s on 2 cores).
staging=target/trunk-dist
# shellcheck disable=SC2086
trunk build --release --dist "$staging" ${TRUNK_ARGS:-}
mkdir -p dist
for f in "$staging"/*; do
  name=$(basename "$f")
  cmp -s "$f" "dist/$name" || cp "$f" "dist/$name"
done
for f in dist/*; do
  [ -e "$staging/$(basename "$f")" ] || rm -rf "$f"
done
ls -l dist/ >&2
