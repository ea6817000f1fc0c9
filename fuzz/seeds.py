#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora from the repository's fixtures (nothing is committed).

    fuzz/seeds.py [OUT_DIR]      default: fuzz/corpus

OUT_DIR/<target>/ gets, for each target:
  decode_batch     every payload of tests/fixtures/kv-events up to MAX_LEN bytes, and runs of
                   consecutive payloads from its streams/*.jsonl, joined with SEPARATOR
  frames           those payloads of up to 4 KiB in every framing: live [topic, seq, payload], replay
                   [seq, payload], [topic, seq, payload], each with and without the ROUTER's
                   empty delimiter, and the end-of-replay replies
  protocol_decode  crates/kvscope-protocol/tests/golden/*.hex (one encoded message each)
  engine_messages  crates/kvscope-engine-protocol/tests/golden/*.hex (the page's and the engine
                   worker's messages, one each)
  router_plane     each Dynamo event-plane fixture run's engine batches, each with the plane message
                   published for it (a NATS body, or the ZMQ plane's four frames)
  kvcap_reader     the golden capture, and captures built from its header and fixture payloads
                   (live and replayed records, a cut last record)
Seed file names are content hashes, so running it again adds nothing twice. Standard library only.
"""
import hashlib
import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "kv-events")
PLANE = os.path.join(ROOT, "tests", "fixtures", "dynamo-event-plane")
GOLDEN = os.path.join(ROOT, "crates", "kvscope-protocol", "tests", "golden")
ENGINE_GOLDEN = os.path.join(ROOT, "crates", "kvscope-engine-protocol", "tests", "golden")
# Must equal kvscope_fuzz::SEPARATOR (fuzz/src/lib.rs).
SEPARATOR = b"\xc1\xc1\xc1\xc1"
# Seeds above this are left out; scripts/fuzz.sh passes the same -max_len.
MAX_LEN = {"decode_batch": 16384, "frames": 16384, "protocol_decode": 4096, "kvcap_reader": 32768, "router_plane": 8192,
           "engine_messages": 4096}


def write(out, target, data, counts):
    if len(data) > MAX_LEN[target]:
        return
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, hashlib.sha1(data).hexdigest())
    if not os.path.exists(path):
        with open(path, "wb") as f:
            f.write(data)
    counts.setdefault(target, set()).add(path)


def payloads():
    """(relative path, bytes) of every fixture payload, sorted by path."""
    found = []
    for dirpath, _, files in os.walk(FIXTURES):
        for name in files:
            if name.endswith(".msgpack"):
                path = os.path.join(dirpath, name)
                with open(path, "rb") as f:
                    found.append((os.path.relpath(path, FIXTURES), f.read()))
    return sorted(found)


def streams():
    """Lists of payload paths, one per streams/*.jsonl, in seq order."""
    out = []
    for dirpath, _, files in os.walk(FIXTURES):
        for name in sorted(files):
            if name.endswith(".jsonl"):
                with open(os.path.join(dirpath, name)) as f:
                    out.append([json.loads(line)["payload_file"] for line in f if line.strip()])
    return out


def golden(folder=GOLDEN):
    """name -> bytes of every golden .hex file."""
    out = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".hex"):
            with open(os.path.join(folder, name)) as f:
                out[name[:-4]] = bytes.fromhex("".join(f.read().split()))
    return out


def mp_uint(v):
    if v < 0x80:
        return bytes([v])
    if v < 0x100:
        return b"\xcc" + bytes([v])
    if v < 0x10000:
        return b"\xcd" + struct.pack(">H", v)
    if v < 0x100000000:
        return b"\xce" + struct.pack(">I", v)
    return b"\xcf" + struct.pack(">Q", v)


def mp_bin(b):
    if len(b) < 0x100:
        return b"\xc4" + bytes([len(b)]) + b
    if len(b) < 0x10000:
        return b"\xc5" + struct.pack(">H", len(b)) + b
    return b"\xc6" + struct.pack(">I", len(b)) + b


def record(source, nanos, replayed, frames):
    """One length-prefixed .kvcap record, as capture::encode_record writes it."""
    assert len(frames) < 16
    body = b"\x94" + mp_uint(source) + mp_uint(nanos) + (b"\xc3" if replayed else b"\xc2")
    body += bytes([0x90 | len(frames)]) + b"".join(mp_bin(f) for f in frames)
    return struct.pack(">I", len(body)) + body


def plane_runs():
    """(tag, engine payloads, plane messages as frame lists) per Dynamo event-plane run."""
    runs = []
    for name in sorted(os.listdir(PLANE)):
        if not name.endswith("_sent.json"):
            continue
        tag = name[: -len("_sent.json")]
        with open(os.path.join(PLANE, name)) as f:
            batches = [bytes.fromhex(b["payload_hex"]) for b in json.load(f)]
        with open(os.path.join(PLANE, tag + "_messages.json")) as f:
            entries = json.load(f)
        messages = []
        for i, e in enumerate(entries):
            with open(os.path.join(PLANE, f"{tag}_{i:03d}.bin"), "rb") as f:
                body = f.read()
            frames_hex = (e.get("headers") or {}).get("frames_hex")
            messages.append([bytes.fromhex(h) for h in frames_hex[:3]] + [body] if frames_hex else [body])
        runs.append((tag, batches, messages))
    return runs


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "fuzz", "corpus")
    counts = {}
    all_payloads = payloads()
    by_path = dict(all_payloads)

    for _, p in all_payloads:
        write(out, "decode_batch", p, counts)
    for stream in streams():
        for i in range(0, len(stream) - 1, 2):
            run = [by_path[f] for f in stream[i : i + 3] if f in by_path]
            write(out, "decode_batch", SEPARATOR.join(run), counts)

    topic = b"kv-events"
    end = struct.pack(">Q", 2**64 - 1)
    # The payloads' own coverage is decode_batch's job: small ones are enough here.
    small = [p for _, p in all_payloads if len(p) <= 4096]
    for i, p in enumerate(small):
        seq = struct.pack(">Q", i)
        framings = [
            [topic, seq, p],
            [seq, p],
            [b"", seq, p],
            [b"", topic, seq, p],
        ]
        # Every payload live; each also in one of the replay framings, in turn.
        for frames in (framings[0], framings[1 + i % 3]):
            write(out, "frames", SEPARATOR.join(frames), counts)
    for frames in ([b"", end, b""], [topic, end, b""], [struct.pack(">Q", 7), b""], [b"", end]):
        write(out, "frames", SEPARATOR.join(frames), counts)

    gold = golden()
    for data in gold.values():
        write(out, "protocol_decode", data, counts)
    for data in golden(ENGINE_GOLDEN).values():
        write(out, "engine_messages", data, counts)

    capture = gold["capture"]
    header_len = struct.unpack(">I", capture[10:14])[0]
    head = capture[: 14 + header_len]
    write(out, "kvcap_reader", capture, counts)
    write(out, "kvcap_reader", head, counts)
    groups = {}
    for path, p in all_payloads:
        groups.setdefault(path.split(os.sep)[0], []).append(p)
    for n, (producer, ps) in enumerate(sorted(groups.items())):
        recs = b""
        for i, p in enumerate(ps[:6]):
            seq = struct.pack(">Q", i)
            replayed = i % 3 == 2
            frames = [seq, p] if replayed else [topic, seq, p]
            recs += record(0, 1_700_000_000_000_000_000 + i, replayed, frames)
        write(out, "kvcap_reader", head + recs, counts)
        if n % 4 == 0:
            write(out, "kvcap_reader", head + recs[: len(recs) - 5], counts)

    for tag, batches, messages in plane_runs():
        for i, batch in enumerate(batches):
            msg = messages[min(i, len(messages) - 1)]
            write(out, "router_plane", SEPARATOR.join([batch] + msg), counts)

    for target in sorted(MAX_LEN):
        d = os.path.join(out, target)
        files = os.listdir(d) if os.path.isdir(d) else []
        size = sum(os.path.getsize(os.path.join(d, f)) for f in files)
        print(f"seeds: {target}: {len(counts.get(target, ()))} seeds; {d} holds {len(files)} files, {size} bytes")


if __name__ == "__main__":
    main()
