#!/usr/bin/env python3
"""Writes section 7 of BENCHMARKS.md, the engine worker alone, from one run of
scripts/bench_engine.sh (its directory as the only argument; criterion's estimates from
target/criterion, relative to the working directory; the Chromium figures from wasm.log's
`BENCH wasm_engine` lines). Every figure is a ratio against decode+normalize of the same bytes
in the same run and the same build. Standard library only."""

import json
import sys
from pathlib import Path

from bench_sections import tagged_records, write_section

HEADING = "## 7. The engine worker alone"
GLANCE = "| 7. Engine worker |"
run = Path(sys.argv[1] if len(sys.argv) > 1 else "target/bench-run/engine")
STREAMS = (
    ("kimi_k3", "the Kimi-K3 incident (corpus bytes, 3 workers, 43-64 KB batches)"),
    ("fleet16", "a synthetic vLLM 0.33 fleet (16 workers, about 8 small events a batch)"),
)
BENCHES = ("decode", "normalize", "engine", "engine_router", "summarize")


def kv(path):
    return dict(l.split("=", 1) for l in path.read_text().splitlines() if "=" in l) if path.exists() else {}


def median_seconds(stream, bench):
    p = Path("target/criterion") / f"engine_{stream}" / bench / "new" / "estimates.json"
    return json.loads(p.read_text())["median"]["point_estimate"] / 1e9 if p.exists() else None


def streams():
    return {s["stream"]: s for s in tagged_records(run / "engine.log", "BENCH engine_stream")}


def per_s(n, secs, unit):
    if not n or not secs:
        return "n/a"
    r = n / secs
    return f"{r / 1e6:.2f} M{unit}/s" if r >= 1e6 else f"{r / 1e3:.1f} k{unit}/s"


info = kv(run / "run.txt")
found = streams()
md = [HEADING + ": a recorded stream through the worker's engine, natively and in Chromium\n"]
md.append(f"Written by `scripts/bench_engine.sh` (run {info.get('date', '?')}, commit {info.get('commit', '?')}, "
          f"{info.get('cores', '?')} cores, {info.get('cpu', '?')}; load average {info.get('load', '?')} when it ended).")
md.append("criterion medians of one pass over every frame (`crates/kvscope-engine/benches/engine.rs`): the worker's")
md.append("`Engine` applying the server's WebSocket messages as its host does (protocol decode, both policies, trees,")
md.append("timeline marks, retention, the router's index under A and B), without and with an event-plane source")
md.append("(the relay's prediction and the reconciliation: `kvscope demo`'s default), against decoding alone and")
md.append("decode+normalize under one policy, the figure table 1's wasm bench reports. Natively first, then the")
md.append("same passes in Chromium below; the page's own run is table 4 and section 5.\n")
md.append("| stream | frames | events | decode | decode+normalize | engine | vs normalize | engine, router side on | vs normalize | one summary |")
md.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
glance = []
missing = []
for name, about in STREAMS:
    s = found.get(name, {})
    t = {b: median_seconds(name, b) for b in BENCHES}
    if not t["normalize"] or not t["engine"] or not t["engine_router"]:
        missing.append(f"the `{name}` stream's criterion estimates")
        continue
    ev, nbytes = s.get("events"), s.get("bytes")
    r1, r2 = t["normalize"] / t["engine"], t["normalize"] / t["engine_router"]
    summ = f"{t['summarize'] * 1e3:.2f} ms" if t["summarize"] else "n/a"
    md.append(f"| `{name}`: {about} | {s.get('frames', 'n/a')} | {ev or 'n/a'} | {per_s(ev, t['decode'], 'ev')} | "
              f"{per_s(ev, t['normalize'], 'ev')}, {per_s(nbytes, t['normalize'], 'B')} | {per_s(ev, t['engine'], 'ev')} | **{r1:.2f}x** | "
              f"{per_s(ev, t['engine_router'], 'ev')} | **{r2:.2f}x** | {summ} |")
    glance.append(f"{GLANCE} `{name}`: the worker's engine, router side on, vs decode+normalize of the same bytes (native; goal 0.5x) | "
                  f"{r2:.2f}x events/s |")

wasm = {}
for r in tagged_records(run / "wasm.log", "BENCH wasm_engine"):
    wasm.setdefault(r["stream"], {})[r["bench"]] = r
md.append("")
md.append("In Chromium" + (f" ({info['chromium']})" if info.get("chromium") else "") + ": the engine's wasm build (`crates/kvscope-engine/tests/wasm_bench.rs`)")
md.append("in a dedicated worker, as on the page, fed the same messages as fast as it takes them, with no server and no")
md.append("demo on the cores; the best of 3 rounds of at least 0.8 s each, against decode and decode+normalize of the")
md.append("same bytes in the same worker. The issue's goal is 0.5x with one worker.\n")
md.append("| stream | decode | decode+normalize | engine | vs normalize | engine, router side on | vs normalize |")
md.append("|---|---:|---:|---:|---:|---:|---:|")
for name, about in STREAMS:
    w = wasm.get(name, {})
    if not all(b in w for b in ("decode", "normalize", "engine", "engine_router")):
        missing.append(f"the `{name}` stream in Chromium")
        continue
    t = {b: w[b]["seconds_per_pass"] for b in ("decode", "normalize", "engine", "engine_router")}
    ev, nbytes = w["normalize"]["events"], w["normalize"]["bytes"]
    r1, r2 = t["normalize"] / t["engine"], t["normalize"] / t["engine_router"]
    md.append(f"| `{name}` | {per_s(ev, t['decode'], 'ev')} | {per_s(ev, t['normalize'], 'ev')}, {per_s(nbytes, t['normalize'], 'B')} | "
              f"{per_s(ev, t['engine'], 'ev')}, {per_s(nbytes, t['engine'], 'B')} | **{r1:.2f}x** | "
              f"{per_s(ev, t['engine_router'], 'ev')}, {per_s(nbytes, t['engine_router'], 'B')} | **{r2:.2f}x** |")
    glance.append(f"{GLANCE} `{name}`: the worker's engine in Chromium, router side on, vs wasm decode+normalize of the same bytes "
                  f"(goal 0.5x) | {r2:.2f}x events/s |")
captures = [r for r in tagged_records(run / "capture.log", "BENCH") if r.get("kind") == "capture"]
md.append("")
md.append("Captures opened in the page (`tests/e2e/browser_bench.rs` with `KVSCOPE_BENCH_CAPTURE`): the file chosen")
md.append("in the page's file input, served by a static server (no kvscope server, no fleet on the cores), timed until")
md.append("every frame is on the cards; the engine worker decodes, classifies under both policies and models the")
md.append("router's index. Against `kvscope check --policy fixed --json` of the same file natively (best of 3 after a")
md.append("warm-up), the figure the issue compares with. Each file is opened with one engine worker and with two")
md.append("(`?engines=2`: the sources split over two workers, each policy's index modelled whole by one of them), in")
md.append("turn, in rounds; *vs one worker* sets each opening against the one-worker opening of its round. Long tasks")
md.append("and the main thread's share are the opening's.\n")
md.append("| capture | round | engine workers | kvscope check (native) | the page | page vs check | vs one worker | main-thread tasks ≥ 50 ms (longest) | main thread busy |")
md.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")


def capture_about(c):
    return f"{c['bytes'] / 2**20:,.0f} MiB, {c['sources']} sources, {c['frames']:,} frames, {c['events']:,} events"


by_file = {}
for c in captures:
    by_file.setdefault(c.get("file", capture_about(c)), []).append(c)
for opened in by_file.values():
    rounds = {}
    for c in opened:
        k = c.get("engines") or 1
        # The rounds are the order of the openings: a round ends where an engine count repeats.
        r = len([x for x in rounds if k in rounds[x]]) + 1
        rounds.setdefault(r, {})[k] = c
    ratios, speedups = {}, []
    for r in sorted(rounds):
        for k in sorted(rounds[r]):
            c = rounds[r][k]
            ratio = c["check_seconds"] / c["page_seconds"]
            ratios.setdefault(k, []).append(ratio)
            base = rounds[r].get(1)
            vs_one = base["page_seconds"] / c["page_seconds"] if base and k != 1 else None
            if vs_one:
                speedups.append(vs_one)
            md.append(f"| {capture_about(c)} | {r} | {k} | {c['check_seconds']:.2f} s, {per_s(c['events'], c['check_seconds'], 'ev')} | "
                      f"{c['page_seconds']:.2f} s, {per_s(c['events'], c['page_seconds'], 'ev')}, {per_s(c['bytes'], c['page_seconds'], 'B')} | "
                      f"**{ratio:.2f}x** | {f'**{vs_one:.2f}x**' if vs_one else ''} | {c['long_tasks']} ({c['longest_task_ms']:.0f} ms) | "
                      f"{c['main_thread']['task']:.0%} |")
    c = opened[0]
    what = f"a {c['bytes'] / 2**20:,.0f} MiB capture ({c['sources']} sources, {c['frames']:,} frames)"
    for k in sorted(ratios):
        workers = "one engine worker" if k == 1 else f"{k} engine workers"
        glance.append(f"{GLANCE} {what} opened in the page, {workers}, vs `kvscope check` of the same file | "
                      f"{' / '.join(f'{x:.2f}x' for x in ratios[k])} events/s |")
    if speedups:
        glance.append(f"{GLANCE} {what} opened in the page: 2 engine workers vs one, each round | "
                      f"{' / '.join(f'{x:.2f}x' for x in speedups)} |")
if not captures:
    missing.append("a capture opened in the page")
if missing:
    md.append("\nNot measured in this run: " + "; ".join(missing) + ".")
write_section(HEADING, md + [""], GLANCE, glance)
