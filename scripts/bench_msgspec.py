#!/usr/bin/env python3
"""Decode the kvscope benchmark inputs with msgspec, the decoder vLLM's own example subscriber uses.

The event structs below are written from the wire rules (docs: docs/rules.md, "Wire rules";
the corpus README), not copied from vLLM:

- vLLM up to 0.23 publishes each event as a tagged array (msgspec ``array_like=True, tag=True``):
  the tag first, then the fields by position. Trailing fields a release does not have are absent,
  so every field after ``block_size`` has a default.
- vLLM 0.24 on and SGLang publish tagged maps (``tag_field="type"``): fields by name, unknown keys
  ignored.
- The batch is ``[ts, events, data_parallel_rank]`` (2 elements in vLLM 0.9.0).

Usage:
  bench_msgspec.py INPUT_DIR [--seconds S]   time every workload kvscope-bench-inputs wrote
  bench_msgspec.py --check-corpus CORPUS_DIR  decode every corpus payload and compare with its manifest

Each timed workload prints one machine-readable line:
  BENCH msgspec {"workload": ..., "events": ..., "bytes": ..., "seconds_per_pass": ...,
                 "events_per_s": ..., "mb_per_s": ...}
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import time
from pathlib import Path
from typing import Any, Optional, Union

import msgspec

Hash = Union[int, bytes]


# --- vLLM <= 0.23: tagged arrays -------------------------------------------------------------

class ArrayBlockStored(msgspec.Struct, array_like=True, tag="BlockStored"):
    block_hashes: list[Hash]
    parent_block_hash: Optional[Hash]
    token_ids: list[int]
    block_size: int
    lora_id: Optional[int] = None
    medium: Optional[str] = None
    lora_name: Optional[str] = None
    extra_keys: Optional[list[Any]] = None
    group_idx: Optional[int] = None
    kv_cache_spec_kind: Optional[str] = None
    kv_cache_spec_sliding_window: Optional[int] = None


class ArrayBlockRemoved(msgspec.Struct, array_like=True, tag="BlockRemoved"):
    block_hashes: list[Hash]
    medium: Optional[str] = None
    group_idx: Optional[int] = None


class ArrayAllBlocksCleared(msgspec.Struct, array_like=True, tag="AllBlocksCleared"):
    pass


ArrayEvent = Union[ArrayBlockStored, ArrayBlockRemoved, ArrayAllBlocksCleared]


class ArrayBatch(msgspec.Struct, array_like=True):
    ts: float
    events: list[ArrayEvent]
    data_parallel_rank: Optional[int] = None


# --- vLLM >= 0.24 and SGLang: tagged maps ----------------------------------------------------

class MapBlockStored(msgspec.Struct, tag_field="type", tag="BlockStored"):
    block_hashes: list[Hash]
    parent_block_hash: Optional[Hash]
    token_ids: list[int]
    block_size: int
    lora_id: Optional[int] = None
    medium: Optional[str] = None
    lora_name: Optional[str] = None
    extra_keys: Optional[list[Any]] = None
    group_idx: Optional[int] = None
    kv_cache_spec_kind: Optional[str] = None
    kv_cache_spec_sliding_window: Optional[int] = None
    locality: Optional[str] = None
    ownership: Optional[str] = None
    session_id: Optional[str] = None
    cache_salt: Optional[str] = None


class MapBlockRemoved(msgspec.Struct, tag_field="type", tag="BlockRemoved"):
    block_hashes: list[Hash]
    medium: Optional[str] = None
    group_idx: Optional[int] = None
    locality: Optional[str] = None
    ownership: Optional[str] = None


class MapAllBlocksCleared(msgspec.Struct, tag_field="type", tag="AllBlocksCleared"):
    ownership: Optional[str] = None


MapEvent = Union[MapBlockStored, MapBlockRemoved, MapAllBlocksCleared]


class MapBatch(msgspec.Struct, array_like=True):
    ts: float
    events: list[MapEvent]
    data_parallel_rank: Optional[int] = None


ARRAY_DECODER = msgspec.msgpack.Decoder(ArrayBatch)
MAP_DECODER = msgspec.msgpack.Decoder(MapBatch)


def read_frames(path: Path) -> list[bytes]:
    data = path.read_bytes()
    frames, at = [], 0
    while at < len(data):
        (n,) = struct.unpack_from("<I", data, at)
        frames.append(data[at + 4 : at + 4 + n])
        at += 4 + n
    return frames


def time_workload(entry: dict, frames: list[bytes], seconds: float) -> dict:
    decode = MAP_DECODER.decode
    events = sum(len(decode(f).events) for f in frames)
    if events != entry["events"]:
        raise SystemExit(f"{entry['name']}: msgspec decodes {events} events, kvscope {entry['events']}")
    # Best of several rounds, each as many passes as fit in a fifth of the budget.
    best = float("inf")
    deadline = time.perf_counter() + seconds
    while True:
        start = time.perf_counter()
        passes = 0
        while True:
            for f in frames:
                decode(f)
            passes += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds / 5:
                break
        best = min(best, elapsed / passes)
        if time.perf_counter() >= deadline:
            break
    return {
        "workload": entry["name"],
        "events": events,
        "bytes": entry["bytes"],
        "seconds_per_pass": best,
        "events_per_s": events / best,
        "mb_per_s": entry["bytes"] / best / 1e6,
    }


def check_corpus(root: Path) -> int:
    """Decodes every payload with the struct family of its release; compares with the manifest."""
    manifest = json.loads((root / "manifest.json").read_text())
    failures, checked = [], 0
    for entry in manifest:
        version = tuple(int(x) for x in entry["version"].split("."))
        array_events = entry["producer"] != "sglang" and version <= (0, 23, 0)
        decoder = ARRAY_DECODER if array_events else MAP_DECODER
        payload = (root / entry["file"]).read_bytes()
        checked += 1
        try:
            batch = decoder.decode(payload)
        except msgspec.DecodeError as e:
            failures.append(f"{entry['file']}: {e}")
            continue
        want = entry["expect"]["events"]
        if len(batch.events) != len(want):
            failures.append(f"{entry['file']}: {len(batch.events)} events, manifest {len(want)}")
            continue
        for i, (got, exp) in enumerate(zip(batch.events, want)):
            name = type(got).__name__.removeprefix("Array").removeprefix("Map")
            if name != exp["type"]:
                failures.append(f"{entry['file']}: events[{i}] is {name}, manifest {exp['type']}")
            elif name != "AllBlocksCleared":
                hashes = [h if isinstance(h, int) else int.from_bytes(h[-8:], "big") for h in got.block_hashes]
                hashes = [str(h % (1 << 64)) for h in hashes]
                if hashes != exp["block_hashes"]:
                    failures.append(f"{entry['file']}: events[{i}].block_hashes differ")
                if name == "BlockStored" and len(got.token_ids) != exp["token_count"]:
                    failures.append(f"{entry['file']}: events[{i}].token_count differs")
    print(f"checked {checked} corpus payloads; {len(failures)} failed")
    for f in failures:
        print("  " + f)
    # The one payload no release's structs accept: SGLang's bigram page (see the corpus README).
    expected = [f for f in failures if "sglang-3.msgpack" in f]
    return 0 if checked and failures == expected else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input_dir", nargs="?", type=Path)
    ap.add_argument("--seconds", type=float, default=3.0, help="time budget per workload (default 3)")
    ap.add_argument("--check-corpus", type=Path, metavar="CORPUS_DIR")
    args = ap.parse_args()
    if args.check_corpus:
        return check_corpus(args.check_corpus)
    if not args.input_dir:
        ap.error("INPUT_DIR is required (run kvscope-bench-inputs DIR first)")
    index = json.loads((args.input_dir / "inputs.json").read_text())
    for entry in index:
        frames = read_frames(args.input_dir / f"{entry['name']}.frames")
        result = time_workload(entry, frames, args.seconds)
        result["msgspec"] = msgspec.__version__
        print("BENCH msgspec " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
