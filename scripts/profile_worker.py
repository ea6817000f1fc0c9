"""Where the page's engine worker (and the server beside it) spend their time, from a system-wide
`perf record -g` of the browser bench with V8's `--perf-basic-prof` (scripts/profile_worker.sh).

V8 names each wasm function it compiled in /tmp/perf-PID.map, and keeps frame pointers in its
code, so `perf script` gives every sample of the engine worker a stack of Rust function names.
This reads that text and prints:

- each thread's share of the machine (the server and the demo engines, the engine worker, the
  page's main thread, the rest of Chromium);
- the engine worker's functions by inclusive share (a function counts once per sample);
- for each name given with --children, what it spends its time in (its direct callees).

Standard library only. Usage:
    perf script -i perf.data | python3 scripts/profile_worker.py [--top N] [--children NAME ...]
"""

import argparse
import collections
import re
import sys

# A wasm or JS function in V8's map: "JS:<name>::h<hash>-<index>-<tier>", a Rust name inside.
WASM = re.compile(r"JS:(?P<name>.*?)(::h[0-9a-f]{16})?(\[\d+\])?-\d+-(turbofan|liftoff|maglev|sparkplug)")
HEADER = re.compile(r"^(?P<comm>\S.*?)\s+\d+(/\d+)?\s+\[\d+\]")

ENGINE_WORKER = "DedicatedWorker"


def samples(lines):
    """(thread name, [frame text, leaf first]) per sample of `perf script`'s default output."""
    comm, frames = None, []
    for line in lines:
        if not line.strip():
            if comm is not None:
                yield comm, frames
            comm, frames = None, []
            continue
        if comm is None:
            m = HEADER.match(line)
            comm = m.group("comm").strip() if m else line.split()[0]
        else:
            frames.append(line.strip())
    if comm is not None:
        yield comm, frames


def function(frame):
    """The Rust function of a wasm frame, without its hash; None for other frames."""
    m = WASM.search(frame)
    return m.group("name") if m else None


def report(stream, top, children):
    threads = collections.Counter()
    inclusive = collections.Counter()
    callees = {name: collections.Counter() for name in children}
    within = collections.Counter()
    worker_samples = 0
    for comm, frames in samples(stream):
        threads[comm] += 1
        if comm != ENGINE_WORKER:
            continue
        worker_samples += 1
        names = [n for n in (function(f) for f in frames) if n]
        for n in set(names):
            inclusive[n] += 1
        for target in children:
            hits = [i for i, n in enumerate(names) if n.startswith(target)]
            if hits:
                # The outermost call: recursion counts once.
                i = hits[-1]
                within[target] += 1
                callees[target][names[i - 1] if i > 0 else "(self)"] += 1
    total = sum(threads.values())
    if total == 0:
        sys.exit("no samples: was perf recording while the bench ran?")
    print(f"samples: {total} over every thread; the engine worker's: {worker_samples}")
    print("\nthreads, share of all samples (2 cores: 50% is one core):")
    for comm, n in threads.most_common(8):
        print(f"  {100 * n / total:5.1f}%  {comm}")
    if worker_samples == 0:
        return
    print(f"\nthe engine worker's functions, inclusive, top {top}:")
    for name, n in inclusive.most_common(top):
        print(f"  {100 * n / worker_samples:5.1f}%  {name}")
    for target in children:
        print(f"\n{target}: {100 * within[target] / worker_samples:.1f}% of the worker; its callees:")
        for name, n in callees[target].most_common(10):
            print(f"  {100 * n / worker_samples:5.1f}%  {name}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--children", nargs="*", default=[])
    args = parser.parse_args()
    report(sys.stdin, args.top, args.children)


if __name__ == "__main__":
    main()
