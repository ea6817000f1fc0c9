"""BENCHMARKS.md's sections measured by their own command, apart from scripts/bench.sh.

One list of them, read by bench_report.py (which carries each over, with its rows of the
overview, when it rewrites tables 1-4) and by each section's own report script (which writes
its section and rows with `write_section`). Standard library only.
"""

import json
import re
from pathlib import Path

# (heading prefix, prefix of its rows in the overview table or None): the sections written
# apart, in the order they appear.
APART = (
    ("## Event-plane intake", None),
    ("## 5. The dashboard at fleet scale", "| 5. "),
    ("## 6. The router's index", "| 6. "),
    ("## 7. The engine worker alone", "| 7. "),
    ("## 8. First run", "| 8. "),
)

HEADINGS = tuple(h for h, _ in APART)
GLANCE_PREFIXES = tuple(g for _, g in APART if g)


def write_section(heading, section, glance_prefix, glance_rows, path=Path("BENCHMARKS.md")):
    """Puts `section` (lines, starting with its heading) in place of the one under `heading`
    (or before "Not measured in this run"), and `glance_rows` in place of the overview's rows
    starting with `glance_prefix`."""
    lines = path.read_text().splitlines() if path.exists() else []
    top = next((i for i, l in enumerate(lines) if l.startswith("## At a glance")), None)
    if top is not None:
        # The new rows go where the section's old ones were, so the overview stays in section
        # order; a section's first rows go after the table's last.
        first_old = next((i for i, l in enumerate(lines) if l.startswith(glance_prefix)), None)
        lines = [l for l in lines if not l.startswith(glance_prefix)]
        if first_old is None:
            first_old = next(i for i in range(top, len(lines)) if lines[i].startswith("|"))
            while first_old < len(lines) and lines[first_old].startswith("|"):
                first_old += 1
        lines[first_old:first_old] = glance_rows
    start = next((i for i, l in enumerate(lines) if l.startswith(heading)), None)
    if start is None:
        at = next((i for i, l in enumerate(lines) if l.startswith("## Not measured in this run")), len(lines))
        lines[at:at] = section
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        lines[start:end] = section
    path.write_text("\n".join(lines) + "\n")


def tagged_records(path, tag):
    """The JSON objects a run logged as `TAG {...}` lines (`BENCH engine_stream {...}`,
    `FIRST-RUN {...}`), in order; none when the log is missing."""
    pattern = re.compile(re.escape(tag) + r" (\{.*\})\s*$")
    text = path.read_text(errors="replace") if path.exists() else ""
    return [json.loads(m.group(1)) for m in map(pattern.search, text.splitlines()) if m]
