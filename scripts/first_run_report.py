#!/usr/bin/env python3
"""Writes section 8 of BENCHMARKS.md, a newcomer's first run, from one run of
scripts/first-run.sh (its output directory as the only argument, default
target/bench-run/first-run): each step of the README's two commands with its time, on a fresh
clone. Standard library only."""

import re
import sys
from pathlib import Path

from bench_sections import tagged_records, write_section

HEADING = "## 8. First run"
GLANCE = "| 8. First run |"
run = Path(sys.argv[1] if len(sys.argv) > 1 else "target/bench-run/first-run")


def records():
    return {r["what"]: r for r in tagged_records(run / "first-run.log", "FIRST-RUN")}


def mmss(s):
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"


def demo_rows(demo):
    """demo.sh prints the time since its start at each step; a step lasts until the next one."""
    steps = demo["steps"]
    rows = []
    for i, st in enumerate(steps):
        end = steps[i + 1]["at_s"] if i + 1 < len(steps) else demo["to_url_s"]
        # The run's own empty CARGO_HOME is a temporary directory; name it for what it is.
        step = re.sub(r"/tmp/kvscope-first-run\.\w+/cargo-home", "$CARGO_HOME", st["step"])
        rows.append(f"| {step} | {mmss(end - st['at_s'])} |")
    return rows


TOOLS_STEP = "installing tools"


def at_commit(r):
    """A command timed at another commit than the run's (one command measured again) says so."""
    c = r.get("commit")
    return f" (at commit {c})" if c and c != info.get("commit") else ""

found = records()
info = found.get("run", {})
md = [HEADING + ": a newcomer's two commands on a fresh clone\n"]
md.append(f"Written by `scripts/first-run.sh` and `scripts/first_run_report.py` (run {info.get('date', '?')}, commit "
          f"{info.get('commit', '?')}, {info.get('cores', '?')} cores, {info.get('cpu', '?')}). The demo runs with an empty")
md.append("`CARGO_HOME` (every crate downloaded, every tool built); the tests run in a second fresh clone (an empty")
md.append("target directory) with the tools installed, as a developer has them after the first run. Debian's packages")
md.append("and the peers' virtualenv are machine-wide and were already there. Times are wall-clock on a machine that")
md.append("may be shared; compare steps within the run.\n")
glance = []
missing = []
demo = found.get("demo")
if demo:
    md.append(f"`scripts/demo.sh`, until `kvscope demo` printed its URL: **{mmss(demo['to_url_s'])}** (goal: 15 min, aim 10)"
              f"{at_commit(demo)}.\n")
    md.append("| step | time |")
    md.append("|---|---:|")
    md += demo_rows(demo)
    md.append("")
    glance.append(f"{GLANCE} `scripts/demo.sh` on a fresh machine, until the demo's URL (goal 15 min) | {mmss(demo['to_url_s'])} |")
else:
    missing.append("the demo command")
test = found.get("test")
if test:
    tools = sum(st["s"] for st in test["steps"] if st["step"].startswith(TOOLS_STEP))
    less_tools = test["s"] - tools
    outcome = test["result"] or f"exit {test['exit']}"
    md.append(f"`scripts/test.sh`: **{mmss(less_tools)}** with the tools installed (goal: 25 min), "
              f"{mmss(test['s'])} in all with {mmss(tools)} installing what was missing; {outcome}{at_commit(test)}.\n")
    md.append("| step | time | share |")
    md.append("|---|---:|---:|")
    for st in test["steps"]:
        share = "" if st["step"].startswith(TOOLS_STEP) or not less_tools else f"{100 * st['s'] / less_tools:.0f}%"
        md.append(f"| {st['step']} | {mmss(st['s'])} | {share} |")
    md.append("")
    glance.append(f"{GLANCE} `scripts/test.sh` on a fresh clone, tools installed (goal 25 min) | {mmss(less_tools)} |")
else:
    missing.append("the test command")
if missing:
    md.append("Not measured in this run: " + "; ".join(missing) + ".\n")
write_section(HEADING, md, GLANCE, glance)
