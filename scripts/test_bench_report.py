#!/usr/bin/env python3
"""Tests of scripts/bench_report.py, bench_index_report.py and bench_engine_report.py: each runs on a made-up run
directory and the tables it writes carry the ratios the made-up timings imply; and of
profile_worker.py, on made-up `perf script` samples.

    python3 scripts/test_bench_report.py     # scripts/test.sh runs it; standard library only

The run is the smallest one scripts/bench.sh can leave: criterion estimates for table 1,
msgspec, wasm and sketch lines, a profile, and no tier-tree, relay or browser logs (those steps
then show up under "Not measured in this run").
"""

import json
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "bench_report.py"
INDEX_SCRIPT = Path(__file__).resolve().parent / "bench_index_report.py"
ENGINE_SCRIPT = Path(__file__).resolve().parent / "bench_engine_report.py"
FIRST_RUN_SCRIPT = Path(__file__).resolve().parent / "first_run_report.py"
FLEET_SCRIPT = Path(__file__).resolve().parent / "bench_fleet_report.py"
PROFILE_SCRIPT = Path(__file__).resolve().parent / "profile_worker.py"
WORKLOADS = ["kimi_k3", "small_gpu", "cpu_offload", "sglang"]
# Seconds per pass, per criterion bench id; the same for every workload except where noted.
TIMES = {
    "kvscope/decode": 0.002,
    "kvscope/decode+normalize": 0.0025,
    "kvscope-dynamo-preset/decode+normalize": 0.003,
    "dynamo/decode": 0.004,
    "dynamo/decode+normalize": 0.01,
    "floor/skip": 0.0008,
}


def write_median(root: Path, group: str, bench: str, secs: float) -> None:
    """A criterion result as criterion writes it: the median of `group/bench`, in ns."""
    d = root / "target/criterion" / group / bench / "new"
    d.mkdir(parents=True)
    (d / "estimates.json").write_text(json.dumps({"median": {"point_estimate": secs * 1e9}}))


def make_run(root: Path) -> None:
    run, inputs = root / "target/bench-run", root / "target/bench-inputs"
    run.mkdir(parents=True)
    inputs.mkdir(parents=True)
    (inputs / "inputs.json").write_text(json.dumps([
        {"name": w, "about": f"about {w}", "block_size": 16, "payloads": 10, "events": 1000, "bytes": 100_000}
        for w in WORKLOADS
    ]))
    (run / "machine.txt").write_text("\n".join([
        "cores=2", "cpu=Test CPU", "rustc=rustc 1.95.0", "python=Python 3.11.7", "msgspec=0.23.0",
        "chromium=none", "kernel=Linux 6", "memory=24 GB", "date=2026-01-01T00:00Z",
    ]) + "\n")
    (run / "profiler").write_text("perf\n")
    (run / "profile.txt").write_text("### kvscope decode+normalize, kimi_k3\n\n```\n50.00%  count_token_ids\n```\n")
    (run / "steps.txt").write_text("decode\t121\t0.88 1.05 1.58\n")
    (run / "run.txt").write_text("run_seconds=875\n")
    (run / "msgspec.log").write_text("".join(
        f'BENCH msgspec {{"workload": "{w}", "events": 1000, "bytes": 100000, "seconds_per_pass": 0.001}}\n'
        for w in WORKLOADS
    ))
    (run / "wasm.log").write_text("".join(
        f'BENCH wasm {{"workload": "{w}", "bench": "{b}", "seconds_per_pass": 0.004}}\n'
        for w in WORKLOADS for b in ("kvscope/decode", "kvscope/decode+normalize", "floor/skip")
    ))
    (run / "sketch.log").write_text(
        'BENCH sketch {"workload": "cpu_offload", "current_s": 2e-3, "sketch_s": 1e-3, "floor_s": 8e-4}\n'
    )
    for w in WORKLOADS:
        for bench, secs in TIMES.items():
            write_median(root, w, bench.replace("/", "_"), secs)


class BenchReportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        root = Path(cls.tmp.name)
        make_run(root)
        # A section measured by its own command, in the report being replaced: carried over.
        (root / "BENCHMARKS.md").write_text(
            "# old\n\n## At a glance (ratios from this run)\n\n| table | what | ratio or figure |\n|---|---|---:|\n"
            "| 1. Decode | old row | 1.00x |\n| 5. Fleet scale | 64 x 300 for 600 s | 1.00; 0 |\n"
            "| 6. Router's index | bytes | 3.00x bytes |\n\n"
            "## 1. Decode\nold figures\n\n## Event-plane intake: NATS in\n\n| run | 1 |\n\n## Not measured\n- x\n"
        )
        cls.proc = subprocess.run(
            [sys.executable, str(SCRIPT), "target/bench-run", "target/bench-inputs"],
            cwd=root, capture_output=True, text=True,
        )
        out = root / "BENCHMARKS.md"
        cls.md = out.read_text() if out.exists() else ""

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_writes_the_report(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr)
        self.assertEqual(self.proc.stdout.strip(), "wrote BENCHMARKS.md")
        self.assertTrue(self.md.startswith("# Benchmarks: kvscope against"), self.md[:200])

    def test_table_1_rows_are_rates_and_ratios_against_dynamo(self):
        # 1000 events in 2 ms: 500 k events/s, 50 MB/s, and Dynamo's 4 ms make 2.00x.
        self.assertIn("| kvscope native | 500.0 k | 50.0 | **2.00x** | 400.0 k | 40.0 | **4.00x** |", self.md)
        self.assertIn("| Dynamo 1.6.1 native | 250.0 k | 25.0 | **1.00x** | 100.0 k | 10.0 | **1.00x** |", self.md)
        self.assertIn("| skip-only floor, native | 1.25 M | 125.0 | **5.00x** |", self.md)

    def test_summary_states_decode_over_floor(self):
        # decode+normalize 10/2.5, preset 10/3, decode 4/2, msgspec 1/2, decode/floor 2/0.8.
        self.assertIn("| `cpu_offload` | 4.00x | 3.33x | 2.00x | 0.50x | 2.50x |", self.md)
        self.assertIn("| 1. Decode | `kimi_k3`: kvscope decode+normalize (`fixed`) vs Dynamo 1.6.1 | 4.00x events/s |", self.md)

    def test_sketch_and_machine_and_steps(self):
        self.assertIn("| `cpu_offload` | 2.00 ms | 1.00 ms | 2.00x | 1.25x |", self.md)
        self.assertIn("- 2 cores, Test CPU (from /proc/cpuinfo), Linux 6", self.md)
        self.assertIn("**14 min 35 s**", self.md)
        self.assertIn("| decode | 2 min 01 s | 0.88 / 1.05 / 1.58 |", self.md)

    def test_sections_measured_apart_are_carried_over_and_the_rest_rewritten(self):
        self.assertIn("## Event-plane intake: NATS in\n\n| run | 1 |\n", self.md)
        self.assertNotIn("old figures", self.md)
        self.assertNotIn("| 1. Decode | old row |", self.md)
        # Section 5's rows of the overview stay in the overview's table, before the commands.
        glance = self.md[self.md.index("## At a glance"):self.md.index("## Commands")]
        self.assertIn("| 5. Fleet scale | 64 x 300 for 600 s | 1.00; 0 |\n", glance)
        self.assertIn("| 6. Router's index | bytes | 3.00x bytes |\n", glance)
        self.assertLess(self.md.index("## Event-plane intake"), self.md.index("## Not measured in this run"))

    def test_steps_without_logs_are_named_as_not_measured(self):
        tail = self.md[self.md.index("## Not measured in this run"):]
        self.assertIn("table 4 (browser): no results in this run", tail)
        self.assertNotIn("Nothing: all four tables are from this run", tail)


class SectionReportCase(unittest.TestCase):
    """A section report script on a made-up run, into an existing report holding an old section
    and an old overview row. Subclasses name the script, the run directory, the old heading and
    row, and write the run's files in `write_run`."""

    SCRIPT = None
    RUN = None
    OLD_HEADING = None
    OLD_GLANCE_ROW = None

    @classmethod
    def write_run(cls, root, run):
        raise NotImplementedError

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        root = Path(cls.tmp.name)
        run = root / "target/bench-run" / cls.RUN
        run.mkdir(parents=True)
        cls.write_run(root, run)
        (root / "BENCHMARKS.md").write_text(
            "# B\n\n## At a glance (ratios from this run)\n\n| table | what | ratio or figure |\n|---|---|---:|\n"
            f"| 1. Decode | row | 1.00x |\n{cls.OLD_GLANCE_ROW}\n| 99. Later | row | 1.00x |\n\n## Commands\n\n"
            f"{cls.OLD_HEADING}: old\nold figures\n\n## Not measured in this run\n- x\n"
        )
        cls.proc = subprocess.run([sys.executable, str(cls.SCRIPT), f"target/bench-run/{cls.RUN}"], cwd=root, capture_output=True, text=True)
        cls.md = (root / "BENCHMARKS.md").read_text()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()


class IndexReportTest(SectionReportCase):
    """bench_index_report.py on a made-up run of scripts/bench_index.sh, into an existing report."""

    SCRIPT = INDEX_SCRIPT
    RUN = "index"
    OLD_HEADING = "## 6. The router's index"
    OLD_GLANCE_ROW = "| 6. Router's index | old | 9.99x |"

    @classmethod
    def write_run(cls, root, run):
        (run / "run.txt").write_text("date=2026-01-01T00:00Z\ncores=2\ncpu=Test CPU\ncommit=abc1234\nload=1.00 1.00 1.00\n")
        (run / "index.log").write_text(
            'BENCH index {"blocks":1000000,"index_rss_bytes_per_block":150.0,"tree_rss_bytes_per_block":100.0,"ratio":1.50,'
            '"index_estimate_bytes_per_block":140.0,"tree_estimate_bytes_per_block":90.0}\n'
            'BENCH index_model {"truth_blocks":6400,"model_rss_bytes_per_truth_block":400.0,"model_estimate_bytes_per_truth_block":380.0}\n'
            'BENCH index_stream {"stream":"kimi_k3","sources":3,"messages":60,"events":300}\n'
            'BENCH index_stream {"stream":"fleet16","sources":16,"messages":3200,"events":28000}\n'
        )
        (run / "router-index.log").write_text(
            'BENCH router_index {"workers":64,"rate_per_worker":20,"seconds":30,"interval":"1s","dump_bytes":123456,'
            '"serve_cores_off":0.200,"serve_cores_on":0.250,"ratio":1.25,"cpu":"Test CPU"}\n'
        )
        # normalize 1 ms, index 2 ms, A and B 4 ms, report 0.5 ms: 0.50x and 0.25x.
        for stream in ("kimi_k3", "fleet16"):
            for bench, secs in (("normalize", 0.001), ("index", 0.002), ("index_a_b", 0.004), ("report", 0.0005)):
                write_median(root, f"index_{stream}", bench, secs)

    def test_the_section_replaces_the_old_one_before_not_measured(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr)
        self.assertNotIn("old figures", self.md)
        self.assertEqual(self.md.count("## 6. The router's index"), 1)
        self.assertLess(self.md.index("## 6. The router's index"), self.md.index("## Not measured in this run"))
        self.assertIn("2 cores, Test CPU", self.md)

    def test_each_cost_is_a_ratio_against_its_baseline(self):
        # 300 events: normalize 300 k/s, index 150 k/s (0.50x), A and B 75 k/s (0.25x).
        self.assertIn("| 300 | 300.0 k/s | 150.0 k/s | **0.50x** | 75.0 k/s | **0.25x** | 0.50 ms |", self.md)
        self.assertIn("| ratio | **1.50x** | |", self.md)
        self.assertIn("| **1.25x** |", self.md)

    def test_the_overview_rows_are_replaced(self):
        glance = self.md[self.md.index("## At a glance"):self.md.index("## Commands")]
        self.assertNotIn("9.99x", glance)
        self.assertIn("| 6. Router's index | `kimi_k3`: events/s, normalize + index (one policy) vs normalize alone | 0.50x events/s |", glance)
        self.assertIn("| 6. Router's index | bytes per block (RSS): Dynamo's index as modelled vs kvscope's tier tree | 1.50x bytes |", glance)
        self.assertIn("| 6. Router's index | server CPU at 64 workers: /dump polled every 1s vs not polled | 1.25x cores |", glance)


class EngineReportTest(SectionReportCase):
    """bench_engine_report.py on a made-up run of scripts/bench_engine.sh, into an existing report."""

    SCRIPT = ENGINE_SCRIPT
    RUN = "engine"
    OLD_HEADING = "## 7. The engine worker alone"
    OLD_GLANCE_ROW = "| 7. Engine worker | old | 9.99x |"

    @classmethod
    def write_run(cls, root, run):
        (run / "run.txt").write_text("date=2026-01-01T00:00Z\ncores=2\ncpu=Test CPU\ncommit=abc1234\nload=1.00 1.00 1.00\n")
        (run / "engine.log").write_text(
            'BENCH engine_stream {"stream":"kimi_k3","workers":3,"frames":60,"events":300,"bytes":1000000}\n'
            'BENCH engine_stream {"stream":"fleet16","workers":16,"frames":3200,"events":26000,"bytes":5000000}\n'
        )
        # In Chromium: normalize 2 ms, engine 5 ms (0.40x), router side on 8 ms (0.25x).
        (run / "wasm.log").write_text("".join(
            f'BENCH wasm_engine {{"stream": "{stream}", "bench": "{bench}", "frames": 60, "events": 300, "bytes": 1000000, '
            f'"seconds_per_pass": {secs:e}}}\n'
            for stream in ("kimi_k3", "fleet16")
            for bench, secs in (("decode", 0.001), ("normalize", 0.002), ("engine", 0.005), ("engine_router", 0.008))))
        # A 128 MiB capture opened with one engine worker and two, in two rounds: check 1 s, the
        # page 4 s and 5 s with one worker (0.25x, 0.20x), 2 s and 4 s with two (0.50x, 0.25x;
        # 2.00x and 1.25x one worker's round).
        (run / "capture.log").write_text("".join(
            f'BENCH {{"kind": "capture", "file": "small.kvcap", "bytes": 134217728, "sources": 16, "frames": 320000, "events": 800000, '
            f'"engines": {engines}, "check_seconds": 1.0, "page_seconds": {page}, "long_tasks": 0, "longest_task_ms": 0, '
            f'"main_thread": {{"task": 0.2}}}}\n'
            for engines, page in ((1, 4.0), (2, 2.0), (1, 5.0), (2, 4.0))))
        # decode 0.5 ms, normalize 1 ms, engine 4 ms (0.25x), router side on 5 ms (0.20x), a summary 2 ms.
        for stream in ("kimi_k3", "fleet16"):
            for bench, secs in (("decode", 0.0005), ("normalize", 0.001), ("engine", 0.004), ("engine_router", 0.005), ("summarize", 0.002)):
                write_median(root, f"engine_{stream}", bench, secs)

    def test_the_section_replaces_the_old_one(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr)
        self.assertNotIn("old figures", self.md)
        self.assertEqual(self.md.count("## 7. The engine worker alone"), 1)
        self.assertIn("2 cores, Test CPU", self.md)

    def test_each_figure_is_a_ratio_against_normalize_of_the_same_bytes(self):
        # 300 events: decode 600 k/s, normalize 300 k/s (1 MB in 1 ms: 1 GB/s), engine 75 k/s, router side on 60 k/s.
        self.assertIn("| 60 | 300 | 600.0 kev/s | 300.0 kev/s, 1000.00 MB/s | 75.0 kev/s | **0.25x** | 60.0 kev/s | **0.20x** | 2.00 ms |", self.md)
        glance = self.md[self.md.index("## At a glance"):self.md.index("## Commands")]
        self.assertNotIn("9.99x", glance)
        self.assertIn("| 7. Engine worker | `fleet16`: the worker's engine, router side on, vs decode+normalize of the same bytes (native; goal 0.5x) | 0.20x events/s |", glance)
        # The section's rows stay where its old ones were, before a later section's.
        self.assertLess(glance.index("| 7. Engine worker"), glance.index("| 99. Later"))

    def test_a_capture_opened_in_the_page_is_set_against_check_of_the_same_file(self):
        about = "| 128 MiB, 16 sources, 320,000 frames, 800,000 events |"
        self.assertIn(f"{about} 1 | 1 | 1.00 s, 800.0 kev/s | 4.00 s, 200.0 kev/s, 33.55 MB/s | **0.25x** |  | 0 (0 ms) | 20% |", self.md)
        self.assertIn(f"{about} 2 | 1 | 1.00 s, 800.0 kev/s | 5.00 s, 160.0 kev/s, 26.84 MB/s | **0.20x** |  | 0 (0 ms) | 20% |", self.md)
        glance = self.md[self.md.index("## At a glance"):self.md.index("## Commands")]
        self.assertIn("| 7. Engine worker | a 128 MiB capture (16 sources, 320,000 frames) opened in the page, one engine worker, "
                      "vs `kvscope check` of the same file | 0.25x / 0.20x events/s |", glance)

    def test_two_engine_workers_are_set_against_one_in_the_same_round(self):
        about = "| 128 MiB, 16 sources, 320,000 frames, 800,000 events |"
        self.assertIn(f"{about} 1 | 2 | 1.00 s, 800.0 kev/s | 2.00 s, 400.0 kev/s, 67.11 MB/s | **0.50x** | **2.00x** | 0 (0 ms) | 20% |", self.md)
        self.assertIn(f"{about} 2 | 2 | 1.00 s, 800.0 kev/s | 4.00 s, 200.0 kev/s, 33.55 MB/s | **0.25x** | **1.25x** | 0 (0 ms) | 20% |", self.md)
        glance = self.md[self.md.index("## At a glance"):self.md.index("## Commands")]
        self.assertIn("| 7. Engine worker | a 128 MiB capture (16 sources, 320,000 frames) opened in the page, 2 engine workers, "
                      "vs `kvscope check` of the same file | 0.50x / 0.25x events/s |", glance)
        self.assertIn("| 7. Engine worker | a 128 MiB capture (16 sources, 320,000 frames) opened in the page: 2 engine workers vs one, "
                      "each round | 2.00x / 1.25x |", glance)

    def test_the_chromium_figures_are_ratios_in_the_same_worker(self):
        # 300 events, 1 MB: normalize 150 k/s and 500 MB/s, engine 60 k/s (0.40x), router side on 37.5 k/s (0.25x).
        self.assertIn("| `kimi_k3` | 300.0 kev/s | 150.0 kev/s, 500.00 MB/s | 60.0 kev/s, 200.00 MB/s | **0.40x** | 37.5 kev/s, 125.00 MB/s | **0.25x** |", self.md)
        glance = self.md[self.md.index("## At a glance"):self.md.index("## Commands")]
        self.assertIn("| 7. Engine worker | `kimi_k3`: the worker's engine in Chromium, router side on, vs wasm decode+normalize of the same bytes (goal 0.5x) | 0.25x events/s |", glance)


class FleetReportTest(SectionReportCase):
    """bench_fleet_report.py on a made-up run of scripts/bench_fleet.sh: each fleet with the router
    side off and on, into an existing report."""

    SCRIPT = FLEET_SCRIPT
    RUN = "fleet"
    OLD_HEADING = "## 5. The dashboard at fleet scale"
    OLD_GLANCE_ROW = "| 5. Fleet scale | old | 9.99; 9 |"

    @classmethod
    def write_run(cls, root, run):
        (run / "run.txt").write_text("date=2026-01-01T00:00Z\nsoak_seconds=60\ncores=2\ncpu=Test CPU\nchromium=Chromium 1\ncommit=abc1234\n")
        for name, workers, ranks, rate in (("64x300", 64, 1, 300), ("256x20", 256, 1, 20), ("512-sources", 64, 8, 20)):
            for suffix, ingested, busy, tasks in (("", 1.0, 0.25, 0), ("-router", 0.5, 0.6, 2)):
                offered = workers * ranks * rate
                step = {"kind": "step", "workers": workers, "dp_ranks": ranks, "offered_fps": offered, "ingested_fps": offered * ingested,
                        "lagged": suffix != "", "data_quality": "complete", "startup_tasks": [], "startup_longest_task_ms": 0.0,
                        "long_tasks": tasks, "longest_task_ms": 60.0 if tasks else 0.0}
                soak = {"kind": "max", "soak_seconds": 60, "soak_offered_fps": offered, "soak_ingested_fps": offered * ingested,
                        "soak_server_fps": offered * (2 if suffix else 1), "soak_lagged": suffix != "", "soak_data_quality": "complete",
                        "soak_startup_tasks": [[100, 70]] * tasks, "soak_startup_longest_task_ms": 70.0 if tasks else 0.0,
                        "soak_long_tasks": tasks, "soak_longest_task_ms": 60.0 if tasks else 0.0,
                        "soak_main_thread": {"task": busy, "script": 0.05, "layout": 0.04}, "soak_server_cores": 0.5}
                (run / f"{name}{suffix}.log").write_text(f"BENCH {json.dumps(step)}\nBENCH {json.dumps(soak)}\n")

    def test_the_section_replaces_the_old_one(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr)
        self.assertNotIn("old figures", self.md)
        self.assertEqual(self.md.count("## 5. The dashboard at fleet scale"), 1)

    def test_each_fleet_is_measured_with_the_router_side_off_and_on(self):
        self.assertIn("| 512 sources (64 workers x 8 DP ranks) x 20 batches/s, router side off | 60 s | 10,240 | 10,240 (1.00) |", self.md)
        self.assertIn("| 512 sources (64 workers x 8 DP ranks) x 20 batches/s, router side on | 60 s | 10,240 | 5,120 (0.50) |", self.md)
        glance = self.md[self.md.index("## At a glance"):self.md.index("## Commands")]
        self.assertNotIn("9.99", glance)
        self.assertIn("| 5. Fleet scale | 256 x 20, router on for 60 s: ingested / offered; main-thread tasks ≥ 50 ms from page load on | 0.50; 4 |", glance)

    def test_the_main_thread_bound_is_stated_met_or_not(self):
        self.assertIn("| 64 x 300, router off | main thread busy at most 50% of wall time | 25% | ✓ |", self.md)
        self.assertIn("| 64 x 300, router on | main thread busy at most 50% of wall time | 60% | ✗ |", self.md)

    def test_with_the_router_side_on_the_page_is_set_against_the_engines_frames(self):
        # Each batch reaches the server twice (engine and relay): 19,200 x 2 received, 9,600 ingested.
        self.assertIn("| 64 x 300, router on | 19,200 | 38,400 (2.00) | 9,600 (0.50) |", self.md)
        self.assertIn("| 64 x 300, router off | 19,200 | 19,200 (1.00) | 19,200 (1.00) |", self.md)


class FirstRunReportTest(SectionReportCase):
    """first_run_report.py on a made-up run of scripts/first-run.sh, into an existing report."""

    SCRIPT = FIRST_RUN_SCRIPT
    RUN = "first-run"
    OLD_HEADING = "## 8. First run"
    OLD_GLANCE_ROW = "| 8. First run | old | 99 min |"

    @classmethod
    def write_run(cls, root, run):
        (run / "first-run.log").write_text(
            'FIRST-RUN {"what":"run","commit":"abc1234","date":"2026-01-01T00:00Z","cpu":"Test CPU","cores":2}\n'
            'FIRST-RUN {"what":"demo","command":"scripts/demo.sh","to_url_s":650,"steps":[{"at_s":0,"step":"1/3 tools"},'
            '{"at_s":340,"step":"2/3 the dashboard"},{"at_s":497,"step":"3/3 the server"},{"at_s":643,"step":"starting the demo"}]}\n'
            'FIRST-RUN {"what":"test","command":"scripts/test.sh","s":1300,"exit":0,"result":"400 passed, 0 failed",'
            '"steps":[{"s":300,"step":"installing tools (pinned; skipped when present)"},{"s":250,"step":"native tests (workspace)"},'
            '{"s":750,"step":"end-to-end"}]}\n'
        )

    def test_the_section_replaces_the_old_one(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr)
        self.assertNotIn("old figures", self.md)
        self.assertEqual(self.md.count("## 8. First run"), 1)
        self.assertIn("commit abc1234, 2 cores, Test CPU", self.md)

    def test_each_demo_step_lasts_until_the_next(self):
        self.assertIn("until `kvscope demo` printed its URL: **10 min 50 s**", self.md)
        self.assertIn("| 1/3 tools | 5 min 40 s |", self.md)
        self.assertIn("| 2/3 the dashboard | 2 min 37 s |", self.md)
        self.assertIn("| starting the demo | 7 s |", self.md)

    def test_the_test_time_is_given_without_the_tool_installs(self):
        self.assertIn("`scripts/test.sh`: **16 min 40 s** with the tools installed (goal: 25 min), 21 min 40 s in all", self.md)
        self.assertIn("| native tests (workspace) | 4 min 10 s | 25% |", self.md)
        self.assertIn("| end-to-end | 12 min 30 s | 75% |", self.md)
        glance = self.md[self.md.index("## At a glance"):self.md.index("## Commands")]
        self.assertNotIn("99 min", glance)
        self.assertIn("| 8. First run | `scripts/test.sh` on a fresh clone, tools installed (goal 25 min) | 16 min 40 s |", glance)


# Three samples as `perf script` prints them: two of the engine worker (wasm frames named by V8's
# perf map, leaf first), one of the server.
PERF_SCRIPT = """DedicatedWorker 21142 [000] 35489.145575:    2004008 cpu-clock:ppp:
\t    1f86 JS:kvscope_index::dynamo::device::DeviceTree::erase::h36dee0a59554cc94-916-turbofan+0x10 (/tmp/perf-1.map)
\t    1f87 JS:kvscope_index::dynamo::DynamoIndex::apply::h0000000000000001-12-turbofan+0x20 (/tmp/perf-1.map)
\t    1f88 JS:kvscope_index::model::IndexModel::push_decoded::hd180e55b635ea24c-100-turbofan+0x30 (/tmp/perf-1.map)
\t    1f89 JS:kvscope_engine::model::Model::apply_frame::h5c5f1980588bc9a4-355-liftoff+0x40 (/tmp/perf-1.map)
\t     5e1 [unknown] (/usr/lib/chromium/chromium)

DedicatedWorker 21142 [001] 35489.147579:    2004008 cpu-clock:ppp:
\t    1f90 JS:kvscope_normalize::normalizer::Normalizer::normalize_one::h648fb2848e27b06c[1]-230-turbofan+0x5 (/tmp/perf-1.map)
\t    1f89 JS:kvscope_engine::model::Model::apply_frame::h5c5f1980588bc9a4-355-liftoff+0x40 (/tmp/perf-1.map)

tokio-rt-worker 20001/20005 [001] 35489.149000:    2004008 cpu-clock:ppp:
\t    55 kvscope::relay::Hub::publish+0x1 (/work/main/target/release/kvscope)
"""


class ProfileWorkerTest(unittest.TestCase):
    def test_threads_functions_and_callees_are_shares_of_the_samples(self):
        out = subprocess.run(
            [sys.executable, str(PROFILE_SCRIPT), "--children", "kvscope_index::model::IndexModel::push_decoded"],
            input=PERF_SCRIPT, capture_output=True, text=True, check=True,
        ).stdout
        self.assertIn("samples: 3 over every thread; the engine worker's: 2", out)
        self.assertIn(" 66.7%  DedicatedWorker", out)
        self.assertIn(" 33.3%  tokio-rt-worker", out)
        # Inclusive: a function counts once per sample it is on; names lose hash, index and tier.
        self.assertIn("100.0%  kvscope_engine::model::Model::apply_frame\n", out)
        self.assertIn(" 50.0%  kvscope_normalize::normalizer::Normalizer::normalize_one\n", out)
        self.assertIn("kvscope_index::model::IndexModel::push_decoded: 50.0% of the worker; its callees:\n"
                      "   50.0%  kvscope_index::dynamo::DynamoIndex::apply", out)

    def test_no_samples_is_an_error_that_says_what_to_check(self):
        run = subprocess.run([sys.executable, str(PROFILE_SCRIPT)], input="", capture_output=True, text=True)
        self.assertNotEqual(run.returncode, 0)
        self.assertIn("no samples", run.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
