#!/usr/bin/env python3
"""Writes section 6 of BENCHMARKS.md, the router's index model's costs, from one run of
scripts/bench_index.sh (its logs in the directory given as the only argument; criterion's
estimates from target/criterion, relative to the working directory).

Each cost is a ratio against a baseline measured in the same run: normalize + index against
normalize alone, Dynamo's index as modelled against kvscope's tier tree, the server with
`--router-index` against without. Standard library only; scripts/test_bench_report.py runs it on
a made-up run."""

import json
import sys
from pathlib import Path

from bench_sections import tagged_records, write_section

HEADING = "## 6. The router's index"
GLANCE = "| 6. Router's index |"
run = Path(sys.argv[1] if len(sys.argv) > 1 else "target/bench-run/index")
STREAMS = (
    ("kimi_k3", "the Kimi-K3 incident (corpus bytes, 3 workers, block size 1536)"),
    ("fleet16", "a synthetic vLLM 0.33 fleet (16 workers, 16-token blocks, chained stores, removals of the oldest)"),
)


def kv(path):
    return dict(l.split("=", 1) for l in path.read_text().splitlines() if "=" in l) if path.exists() else {}


def bench_lines(name, tag):
    return tagged_records(run / f"{name}.log", f"BENCH {tag}")


def median_seconds(stream, bench):
    p = Path("target/criterion") / f"index_{stream}" / bench / "new" / "estimates.json"
    return json.loads(p.read_text())["median"]["point_estimate"] / 1e9 if p.exists() else None


def rate(events, secs):
    if not events or not secs:
        return "n/a"
    r = events / secs
    return f"{r / 1e6:.2f} M" if r >= 1e6 else f"{r / 1e3:.1f} k"


info = kv(run / "run.txt")
md = [HEADING + ": what modelling it costs\n"]
md.append(f"Written by `scripts/bench_index.sh` (run {info.get('date', '?')}, commit {info.get('commit', '?')}, "
          f"{info.get('cores', '?')} cores, {info.get('cpu', '?')}; load average {info.get('load', '?')} when it ended).")
md.append("Every ratio is against a baseline measured in this run. The index model (`kvscope-index`) is what")
md.append("`check`, the live server and the page's engine worker run beside the normalizer: the engine's")
md.append("truth and, per policy, Dynamo 1.6.1's radix tree fed what that policy lets through.\n")
glance = []
missing = []

streams = {r["stream"]: r for r in bench_lines("index", "index_stream")}
md.append("Events/s through normalize alone (what every page and server already does) against normalize +")
md.append("index (one policy, as `check` runs it) and + index under policies A and B (as the page and the")
md.append("live server run it); criterion medians:\n")
md.append("| stream | events | normalize alone | + index, one policy | ratio | + index, A and B | ratio | a report's walk |")
md.append("|---|---:|---:|---:|---:|---:|---:|---:|")
for name, about in STREAMS:
    s = streams.get(name, {})
    t = {b: median_seconds(name, b) for b in ("normalize", "index", "index_a_b", "report")}
    if not t["normalize"] or not t["index"]:
        missing.append(f"the `{name}` stream's criterion estimates")
        continue
    ev = s.get("events")
    one = t["normalize"] / t["index"]
    both = t["normalize"] / t["index_a_b"] if t["index_a_b"] else None
    walk = f"{t['report'] * 1e3:.2f} ms" if t["report"] else "n/a"
    md.append(f"| `{name}`: {about} | {ev or 'n/a'} | {rate(ev, t['normalize'])}/s | {rate(ev, t['index'])}/s | **{one:.2f}x** | "
              f"{rate(ev, t['index_a_b'])}/s | {f'**{both:.2f}x**' if both else 'n/a'} | {walk} |")
    glance.append(f"{GLANCE} `{name}`: events/s, normalize + index (one policy) vs normalize alone | {one:.2f}x events/s |")
md.append("")
md.append("Ratios below 1 are the index's cost: at 0.5x, modelling the index halves the events/s. A report")
md.append("(`check`'s index objects, the page's figures) walks every block once; the page rebuilds it at most")
md.append("every tenth flush. A and B (`legacy`, `fixed`) read one tree while their indexers have had the")
md.append("same events and sweeps, and copy it where they part: on `fleet16` they never part.\n")

sizes = bench_lines("index", "index")
model = bench_lines("index", "index_model")
if sizes:
    z = sizes[-1]
    md.append(f"Bytes per block, {z['blocks']:,} device blocks in chains of 40 held by each (resident set growth,")
    md.append("each kept alive while the other fills, as table 2 measures; beside it the `approx_bytes` estimate")
    md.append("the page's memory bound counts):\n")
    md.append("| structure | RSS bytes per block | estimate per block |")
    md.append("|---|---:|---:|")
    md.append(f"| Dynamo 1.6.1's index as modelled (`DynamoIndex`) | {z['index_rss_bytes_per_block']:.1f} | {z['index_estimate_bytes_per_block']:.1f} |")
    md.append(f"| kvscope's tier tree (`TierTree`), the baseline | {z['tree_rss_bytes_per_block']:.1f} | {z['tree_estimate_bytes_per_block']:.1f} |")
    md.append(f"| ratio | **{z['ratio']:.2f}x** | |")
    if model:
        m = model[-1]
        md.append(f"| the whole model (truth + one index), synthetic fleet, per block the engines hold ({m['truth_blocks']:,}) | "
                  f"{m['model_rss_bytes_per_truth_block']:.1f} | {m['model_estimate_bytes_per_truth_block']:.1f} |")
    md.append("")
    glance.append(f"{GLANCE} bytes per block (RSS): Dynamo's index as modelled vs kvscope's tier tree | {z['ratio']:.2f}x bytes |")
else:
    missing.append("the bytes per block")

cpu = bench_lines("router-index", "router_index")
if cpu:
    c = cpu[-1]
    md.append(f"The server's CPU (`kvscope serve`, utime + stime per wall second, {c['seconds']} s each way) reading")
    md.append(f"{c['workers']} demo engines at {c['rate_per_worker']} batches/s each, with a real Dynamo 1.6.1 indexer")
    md.append(f"(`python -m dynamo.indexer`) subscribed to the same engines:\n")
    md.append("| serve | cores used | ratio |")
    md.append("|---|---:|---:|")
    md.append(f"| without `--router-index` (the baseline) | {c['serve_cores_off']:.3f} | 1.00 |")
    md.append(f"| `--router-index`, /workers and /dump every {c['interval']} ({c['dump_bytes']:,}-byte dump at the end) | "
              f"{c['serve_cores_on']:.3f} | **{c['ratio']:.2f}x** |")
    md.append("")
    glance.append(f"{GLANCE} server CPU at {c['workers']} workers: /dump polled every {c['interval']} vs not polled | {c['ratio']:.2f}x cores |")
else:
    missing.append("the server's CPU with and without `--router-index`")
if missing:
    md.append("Not measured in this run: " + "; ".join(missing) + ".\n")

write_section(HEADING, md, GLANCE, glance)
print(f"wrote {HEADING[3:]} into BENCHMARKS.md")
