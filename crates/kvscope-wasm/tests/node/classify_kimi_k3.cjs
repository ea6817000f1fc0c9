// The JS package as a Node user takes it: `wasm-pack build --target nodejs` of this crate, then
// require() the package and classify the Kimi-K3 incident stream of the corpus. The figures are
// the ones the native tests assert (crates/kvscope-normalize/tests/incident.rs, tests/native.rs).
//
//   node crates/kvscope-wasm/tests/node/classify_kimi_k3.cjs PKG_DIR FIXTURES_DIR
//
// Prints "N passed, 0 failed" and exits 0, or names the first figure that differs and exits 1.
"use strict";
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");

const [pkgDir, fixtures] = process.argv.slice(2);
if (!pkgDir || !fixtures) {
  console.error("usage: node classify_kimi_k3.cjs PKG_DIR FIXTURES_DIR (tests/fixtures/kv-events)");
  process.exit(2);
}
const { KvScope } = require(path.resolve(pkgDir, "kvscope_wasm.js"));

let passed = 0;
function check(name, f) {
  try {
    f();
    passed += 1;
  } catch (e) {
    console.error(`FAILED ${name}: ${e.message}`);
    console.log(`${passed} passed, 1 failed`);
    process.exit(1);
  }
}

function stream(worker) {
  const file = path.join(fixtures, "vllm-0.33.0", "streams", `kimi_k3_worker${worker}.jsonl`);
  return fs
    .readFileSync(file, "utf8")
    .split("\n")
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l))
    .map((m) => ({ seq: m.seq, topic: m.topic, payload: new Uint8Array(fs.readFileSync(path.join(fixtures, m.payload_file))) }));
}

function seqFrame(seq) {
  const b = new Uint8Array(8);
  new DataView(b.buffer).setBigUint64(0, BigInt(seq));
  return b;
}

function classify(policy) {
  const kv = new KvScope(1536, policy);
  const results = [];
  for (let w = 0; w < 3; w++) {
    for (const m of stream(w)) {
      const r = kv.push_frames(`w${w}`, 0, [new TextEncoder().encode(m.topic), seqFrame(m.seq), m.payload]);
      results.push({ w, seq: m.seq, r });
    }
  }
  return { kv, results };
}

check("the policies the package offers", () => {
  const names = KvScope.policies().map((p) => p.name);
  assert.deepEqual(names.slice().sort(), ["dynamo-1.6.1", "fixed", "legacy"]);
  assert.throws(() => new KvScope(1536, "nope"), /nope/);
});

const fixed = classify("fixed");
check("fixed: every frame decodes", () => {
  for (const { w, seq, r } of fixed.results) assert.ok(r.ok, `w${w} seq ${seq}: ${JSON.stringify(r.error)}`);
});
check("fixed: the cpu store of seq 8 is an offload skip on host_pinned", () => {
  const { r } = fixed.results.find((x) => x.w === 0 && x.seq === 8);
  const cpu = r.verdicts[4];
  assert.equal(cpu.code, "offload_block_size_mismatch host_pinned");
  assert.equal(cpu.rule_step, "4");
  assert.match(cpu.text, /medium "cpu" -> HostPinned \(case-insensitive\)/);
});
for (let w = 0; w < 3; w++) {
  check(`fixed: w${w} keeps running with 16 device blocks and 2 offload skips`, () => {
    const c = fixed.kv.counters(`w${w}`, 0);
    assert.equal(c.fatal_count, 0);
    assert.equal(c.verdicts_by_label.offload_block_size_mismatch, 2);
    assert.equal(c.verdicts.host_pinned.offload_block_size_mismatch, 2);
    assert.equal(c.trees.device, 16);
  });
}

const legacy = classify("legacy");
for (let w = 0; w < 3; w++) {
  check(`legacy: w${w} dies at the first cpu store (seq 8), 2 fatal verdicts`, () => {
    const c = legacy.kv.counters(`w${w}`, 0);
    assert.equal(c.fatal_count, 2);
    const first = legacy.results.find((x) => x.w === w && x.r.verdicts.some((v) => v.outcome === "fatal"));
    assert.equal(first.seq, 8);
    const v = first.r.verdicts.find((v) => v.outcome === "fatal");
    assert.equal(v.code, "block_size_mismatch device +unknown_medium_fallback");
  });
}

console.log(`${passed} passed, 0 failed`);
