#!/usr/bin/env python3
"""Writes section 5 of BENCHMARKS.md, the dashboard at fleet scale, from one run of
scripts/bench_fleet.sh (its logs in the directory given as the only argument).

Every figure is beside the rate the demo offered in the same run; the issue's bounds are
stated with each, met or not."""

import json
import re
import sys
from pathlib import Path

from bench_sections import write_section

HEADING = "## 5. The dashboard at fleet scale"
run = Path(sys.argv[1] if len(sys.argv) > 1 else "target/bench-run/fleet")


def kv(path):
    out = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if "=" in line:
                k, v = line.split("=", 1)
                out[k.strip()] = v.strip()
    return out


def bench_lines(name):
    path = run / f"{name}.log"
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            m = re.match(r"BENCH (\{.*\})", line.strip())
            if m:
                rows.append(json.loads(m.group(1)))
    return rows


def kib(n):
    return f"{int(n) / 1024:,.0f} KiB" if n else "n/a"


def mib(n):
    return f"{int(n) / 2**20:,.0f} MiB" if n else "n/a"


def mark(ok):
    return "✓" if ok else "✗"


info, sizes = kv(run / "run.txt"), kv(run / "sizes.txt")
soak_s = info.get("soak_seconds", "?")
# Each fleet with the router side off (`--no-event-plane`), then on (the default demo: a
# simulated Dynamo relay per worker, the event plane and the router's index), as users run it.
FLEETS = (
    ("64x300", "64 workers x 300 batches/s", "64 x 300"),
    ("256x20", "256 workers x 20 batches/s", "256 x 20"),
    ("512-sources", "512 sources (64 workers x 8 DP ranks) x 20 batches/s", "512 x 20"),
)
fleets = [(name + ("-router" if on else ""), f"{label}, router side {'on' if on else 'off'}", f"{short}, router {'on' if on else 'off'}", on)
          for on in (False, True) for name, label, short in FLEETS]
# The bound on the main thread's share of wall time, start-up excluded.
BUSY_BOUND = 0.5
md = [f"{HEADING}\n"]
md.append(f"Run {info.get('date', '?')} at commit `{info.get('commit', '?')}`, {info.get('cores', '?')} cores "
          f"({info.get('cpu', '?')}), {info.get('chromium', '?')}; browser, server and demo engines share the cores.")
md.append("Command: `scripts/bench_fleet.sh` (the browser bench, `tests/e2e/browser_bench.rs`, at three fleets of")
md.append("`kvscope demo --scenario sglang-tiers`, each with the router side off (`--no-event-plane`) and on, as the")
md.append("default demo runs it: a simulated Dynamo relay per worker, the event plane, the router's index under both")
md.append("policies and the reconciliation, all in the page's engine worker). **Baseline:** the frames per second the demo")
md.append("offered in the same run (sources x rate); *ingested / offered* is the share the page counted. Long tasks")
md.append("are read with a `longtask` PerformanceObserver registered before the app's own scripts; *start-up* is")
md.append("page load to 3 s after every source is listed, *steady* the measured stretch after it.\n")
md.append("| fleet | stretch | offered frames/s | ingested frames/s (ingested / offered) | lag notice | data quality at the end | start-up tasks ≥ 50 ms (longest) | steady tasks ≥ 50 ms (longest) |")
md.append("|---|---|---:|---:|---|---|---:|---:|")
glance = []
memory = None
for name, label, short, router in fleets:
    rows = bench_lines(name)
    steps = [r for r in rows if r.get("kind") == "step"]
    maxes = [r for r in rows if r.get("kind") == "max"]
    if not rows:
        md.append(f"| {label} | not measured in this run | | | | | | |")
        continue
    for st in steps:
        ratio = st["ingested_fps"] / st["offered_fps"] if st["offered_fps"] else 0
        md.append(f"| {label} | 20 s | {st['offered_fps']:,.0f} | {st['ingested_fps']:,.0f} ({ratio:.2f}) | "
                  f"{'yes' if st['lagged'] else 'none'} | {st.get('data_quality') or 'n/a'} | "
                  f"{len(st.get('startup_tasks') or [])} ({st['startup_longest_task_ms']:.0f} ms) | {st['long_tasks']} ({st['longest_task_ms']:.0f} ms) |")
    for m in maxes:
        off = m.get("soak_offered_fps") or 0
        ratio = m["soak_ingested_fps"] / off if off else 0
        md.append(f"| {label} | {m['soak_seconds']} s | {off:,.0f} | {m['soak_ingested_fps']:,.0f} ({ratio:.2f}) | "
                  f"{'yes' if m['soak_lagged'] else 'none'} | {m.get('soak_data_quality') or 'n/a'} | "
                  f"{len(m.get('soak_startup_tasks') or [])} ({m['soak_startup_longest_task_ms']:.0f} ms) | {m['soak_long_tasks']} ({m['soak_longest_task_ms']:.0f} ms) |")
        no_task = m["soak_long_tasks"] == 0 and m["soak_startup_longest_task_ms"] < 50
        glance.append((short, m, ratio, no_task))
        if name == "64x300":  # router side off
            memory = m
md.append("")
md.append("Where the frames and the cores went in each sustained run: *received* is what the server read from the")
md.append("demo engines (`kvscope_frames_total`), the second baseline; the main thread's shares of wall time are")
md.append("DevTools' `Performance.getMetrics` (tasks, of which script and layout); the server's cores include the")
md.append("demo engines it runs. With the router side on, the server reads each batch twice, from its engine and")
md.append("through its Dynamo relay on the event plane (received is about 2x offered); the page's count is of engine")
md.append("frames, so it is set against half of what was received.\n")
md.append("| fleet | offered frames/s | received by the server (received / offered) | ingested by the page (ingested / engine frames received) | main thread busy: tasks / script / layout | server and demo engines, cores |")
md.append("|---|---:|---:|---:|---:|---:|")
for short, m, ratio, no_task in glance:
    off = m.get("soak_offered_fps") or 0
    got = m.get("soak_server_fps")
    # The engines' frames: half of what a server with the router side on reads.
    engines = got / 2 if got and short.endswith("router on") else got
    mt = m.get("soak_main_thread") or {}
    recv = f"{got:,.0f} ({got / off:.2f})" if got and off else "n/a"
    page = f"{m['soak_ingested_fps']:,.0f} ({m['soak_ingested_fps'] / engines:.2f})" if engines else "n/a"
    busy = " / ".join(f"{mt[k]:.0%}" for k in ("task", "script", "layout")) if mt else "n/a"
    cores = f"{m['soak_server_cores']:.2f}" if m.get("soak_server_cores") is not None else "n/a"
    md.append(f"| {short} | {off:,.0f} | {recv} | {page} | {busy} | {cores} |")
md.append("")
md.append("Against the issue's bounds (from page load on, start-up included):\n")
md.append("| fleet | bound | this run | met |")
md.append("|---|---|---|:-:|")
for short, m, ratio, no_task in glance:
    longest = max(m["soak_startup_longest_task_ms"], m["soak_longest_task_ms"])
    if short.startswith("64 x 300"):
        dq = m.get("soak_data_quality") or ""
        md.append(f"| {short} | at least 99% of offered frames ingested | {ratio:.2f} | {mark(ratio >= 0.99)} |")
        # The strip says "complete: no gaps, no lost frames, ..." or names each shortfall.
        no_gaps = "complete" in dq or not re.search(r"\bgaps?\b|lost", dq)
        md.append(f"| {short} | 0 lost to lag, 0 seq gaps | lag notice: {'yes' if m['soak_lagged'] else 'none'}; {dq or 'n/a'} | "
                  f"{mark(bool(dq) and not m['soak_lagged'] and no_gaps)} |")
    md.append(f"| {short} | no main-thread task of 50 ms or more over {m['soak_seconds']} s | "
              f"{m['soak_long_tasks']} after start-up; longest {longest:.0f} ms | {mark(no_task)} |")
    busy = (m.get("soak_main_thread") or {}).get("task")
    if busy is not None:
        md.append(f"| {short} | main thread busy at most {BUSY_BOUND:.0%} of wall time | {busy:.0%} | {mark(busy <= BUSY_BOUND)} |")
md.append("")
if memory:
    mm = memory.get("memory_after_soak") or {}
    retained = mm.get("retained") or ""
    kept = re.search(r"([\d,]+) of [\d,]+ events kept \(([\d.]+) MiB\)", retained)
    md.append(f"Memory after {memory['soak_seconds']} s at 64 x 300/s, router side off:\n")
    md.append("| events retained | bytes per retained event (records, marks, fine buckets, as reserved) | engine worker's wasm memory | page's wasm memory | page's JS heap used | the page's own line |")
    md.append("|---:|---:|---:|---:|---:|---|")
    page_wasm = mib(mm.get('page_wasm_memory_bytes'))
    if kept:
        n = int(kept.group(1).replace(",", ""))
        per = float(kept.group(2)) * 2**20 / n if n else 0
        md.append(f"| {n:,} | {per:.0f} B | {mib(mm.get('wasm_memory_bytes'))} | {page_wasm} | {mib(mm.get('js_heap_used_bytes'))} | {retained} |")
    else:
        md.append(f"| n/a | n/a | {mib(mm.get('wasm_memory_bytes'))} | {page_wasm} | {mib(mm.get('js_heap_used_bytes'))} | {retained or 'n/a'} |")
    md.append("")
if sizes:
    md.append("The app's size (`dist/`, as Trunk builds it; the server compresses what it serves): the page's wasm, which")
    md.append("the main thread compiles, and the engine worker's, which the worker compiles:\n")
    md.append("| app | build | wasm | wasm, gzip -9 | wasm as served, br / gzip | JS glue as served, br / gzip |")
    md.append("|---|---|---:|---:|---:|---:|")
    for app, what in (("page", "page (`kvscope-web`)"), ("engine", "engine worker (`kvscope-engine`)")):
        g = lambda k: sizes.get(f"{app}_{k}")
        md.append(f"| {what} | as built and served (wasm-opt off) | {kib(g('wasm'))} | {kib(g('wasm_gzip'))} | "
                  f"{kib(g('served_wasm_br'))} / {kib(g('served_wasm_gzip'))} | {kib(g('served_js_br'))} / {kib(g('served_js_gzip'))} |")
        md.append(f"| {what} | wasm-opt -Oz (binaryen {sizes.get('binaryen', '?')} from npm, {g('wasm_oz_seconds') or '?'} s) | "
                  f"{kib(g('wasm_oz'))} | {kib(g('wasm_oz_gzip'))} | | |")
    md.append("")
    md.append("wasm-opt stays off: it made the longest start-up task 2x longer when measured (index.html says by how much).\n")

# This section's rows of the overview at the top ("At a glance"): bench_report.py keeps them
# when it rewrites the other tables, as it keeps this section.
GLANCE = "| 5. Fleet scale |"
glance_rows = [
    f"{GLANCE} {short} for {m['soak_seconds']} s: ingested / offered; main-thread tasks ≥ 50 ms from page load on | "
    f"{ratio:.2f}; {len(m.get('soak_startup_tasks') or []) + m['soak_long_tasks']} |"
    for short, m, ratio, no_task in glance
]

write_section(HEADING, md, GLANCE, glance_rows)
print(f"wrote {HEADING[3:]} into BENCHMARKS.md")
