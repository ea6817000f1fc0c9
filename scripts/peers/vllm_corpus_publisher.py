#!/usr/bin/env python3
"""Publishes recorded engine payloads through vLLM's own KV-event publisher (`ZmqEventPublisher`
from a release's `vllm/distributed/kv_events.py`), for kvscope's router-index tests.

    python scripts/peers/vllm_corpus_publisher.py --kv-events PATH/kv_events.py

It binds a PUB (and vLLM's replay ROUTER) on a free loopback port and prints one JSON line
{"pub": "tcp://127.0.0.1:PORT"}. Then it reads commands, one per line, from standard input:

    publish FILE     publish FILE (a msgpack batch of this vLLM release) as the next batch:
                     decoded into the release's own KVEventBatch and published through the
                     publisher's encoder, seq counter and replay buffer (every vLLM 0.33 corpus
                     payload comes out byte for byte as recorded)
    skip             burn one sequence number: the next batch leaves a gap (a lost frame)
    restart          shut the publisher down and start a new one on the same port (the
                     engine restarted: its seq counts from 0 again)
    sync             wait until every batch so far went out, then print {"synced": N}

and shuts down when standard input closes. The payloads are the corpus's, so what a reader
gets is what that vLLM release wrote; only vLLM's publisher carries them.
"""

import argparse
import sys
import time

import msgspec

sys.path.insert(0, __import__("os").path.dirname(__file__))
from vllm_publisher import free_port, load_kv_events, say  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kv-events", required=True, help="vllm/distributed/kv_events.py of a release")
    args = ap.parse_args()
    kv = load_kv_events(args.kv_events)
    port, replay_port = free_port(), free_port()

    def start():
        # vLLM binds its PUB only for a wildcard endpoint (its default is tcp://*:5557). After a
        # restart the old sockets' ports take a moment to come free.
        deadline = time.time() + 10
        while True:
            try:
                return kv.ZmqEventPublisher(0, endpoint=f"tcp://*:{port}", replay_endpoint=f"tcp://*:{replay_port}", buffer_steps=10_000)
            except Exception as e:  # zmq.error.ZMQError: Address already in use
                if "in use" not in str(e) or time.time() > deadline:
                    raise
                time.sleep(0.05)

    def drain(p):
        deadline = time.time() + 10
        while p._event_queue.qsize() and time.time() < deadline:
            time.sleep(0.005)
        time.sleep(0.05)

    publisher = start()
    say({"pub": f"tcp://127.0.0.1:{port}", "replay": f"tcp://127.0.0.1:{replay_port}"})
    published = 0
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "publish":
            with open(words[1], "rb") as f:
                publisher.publish(msgspec.msgpack.decode(f.read(), type=kv.KVEventBatch))
            published += 1
        elif words[0] == "skip":
            drain(publisher)
            next(publisher._seq_gen)
        elif words[0] == "restart":
            drain(publisher)
            publisher.shutdown()
            publisher = start()
        elif words[0] == "sync":
            drain(publisher)
            say({"synced": published})
        else:
            say({"error": f"unknown command {words[0]!r}"})
    drain(publisher)
    publisher.shutdown()


if __name__ == "__main__":
    main()
