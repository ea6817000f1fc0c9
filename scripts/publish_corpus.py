#!/usr/bin/env python3
"""Replays corpus streams as engines publish them: a PUB (as XPUB) and a replay ROUTER per stream.

Used by the kvscope server's integration tests (server/tests/it/corpus.rs) and handy by hand:

    python3 scripts/publish_corpus.py --fixtures tests/fixtures/kv-events \
        --stream vllm-0.33.0/streams/kimi_k3_worker0.jsonl --stream ...worker1.jsonl

Each stream file holds one JSON object per line, {"seq", "topic", "payload_file"} (see
tests/fixtures/kv-events/README.md). For stream i the script binds a publisher and a replay
ROUTER on free loopback ports and prints one JSON line:

    {"pub": ["tcp://127.0.0.1:P0", ...], "replay": ["tcp://127.0.0.1:R0", ...]}

It then waits until every publisher has a subscriber (an XPUB sees the subscription, so no
message is lost to the PUB/SUB slow-joiner drop), publishes every message as
[topic, seq (8 bytes big-endian), payload] with the stream's own seqs, prints
{"published": N}, and keeps answering replay requests ([identity, "", start_seq] ->
[identity, "", topic, seq, payload] ..., then seq 0xffffffffffffffff with an empty payload)
until its standard input closes.

Requires pyzmq (`python3 -m pip install pyzmq`; scripts/install-tools.sh installs it).
"""

import argparse
import json
import os
import sys

try:
    import zmq
except ImportError:  # pragma: no cover - depends on the machine
    sys.exit("publish_corpus.py needs pyzmq: python3 -m pip install pyzmq")

END_SEQ = (2**64 - 1).to_bytes(8, "big")


def load(fixtures, stream):
    messages = []
    with open(os.path.join(fixtures, stream), encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            entry = json.loads(line)
            with open(os.path.join(fixtures, entry["payload_file"]), "rb") as p:
                payload = p.read()
            messages.append((entry["topic"].encode(), int(entry["seq"]), payload))
    return messages


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fixtures", required=True, help="the corpus folder (holding README.md)")
    parser.add_argument("--stream", action="append", required=True, help="a streams/*.jsonl file, relative to --fixtures")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for subscribers")
    args = parser.parse_args()

    ctx = zmq.Context()
    streams = [load(args.fixtures, s) for s in args.stream]
    pubs, routers = [], []
    for _ in streams:
        pub = ctx.socket(zmq.XPUB)
        pub.setsockopt(zmq.LINGER, 2000)
        port = pub.bind_to_random_port("tcp://127.0.0.1")
        router = ctx.socket(zmq.ROUTER)
        rport = router.bind_to_random_port("tcp://127.0.0.1")
        pubs.append((pub, f"tcp://127.0.0.1:{port}"))
        routers.append((router, f"tcp://127.0.0.1:{rport}"))
    print(json.dumps({"pub": [e for _, e in pubs], "replay": [e for _, e in routers]}), flush=True)

    # Wait for one subscription per publisher.
    poller = zmq.Poller()
    for pub, _ in pubs:
        poller.register(pub, zmq.POLLIN)
    waiting = {id(p) for p, _ in pubs}
    deadline = args.timeout * 1000
    while waiting and deadline > 0:
        for sock, _ in poller.poll(100):
            msg = sock.recv()
            if msg[:1] == b"\x01":
                waiting.discard(id(sock))
        deadline -= 100
    if waiting:
        sys.exit(f"no subscriber within {args.timeout}s")

    published = 0
    for (pub, _), messages in zip(pubs, streams):
        for topic, seq, payload in messages:
            pub.send_multipart([topic, seq.to_bytes(8, "big"), payload])
            published += 1
    print(json.dumps({"published": published}), flush=True)

    # Serve replays until stdin closes.
    poller = zmq.Poller()
    for router, _ in routers:
        poller.register(router, zmq.POLLIN)
    poller.register(sys.stdin, zmq.POLLIN)
    by_router = {id(r): m for (r, _), m in zip(routers, streams)}
    while True:
        events = dict(poller.poll(200))
        if sys.stdin in events or sys.stdin.fileno() in events:
            if not sys.stdin.read(1):
                break
        for router, _ in routers:
            if router in events:
                identity, _, start = router.recv_multipart()
                start = int.from_bytes(start, "big")
                for topic, seq, payload in by_router[id(router)]:
                    if seq >= start:
                        router.send_multipart([identity, b"", topic, seq.to_bytes(8, "big"), payload])
                router.send_multipart([identity, b"", b"", END_SEQ, b""])
    ctx.destroy(linger=0)


if __name__ == "__main__":
    main()
