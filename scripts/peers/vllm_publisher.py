#!/usr/bin/env python3
"""Runs vLLM's own KV-event publisher (`ZmqEventPublisher` from a release's
`vllm/distributed/kv_events.py`) on loopback, for kvscope's late-join tests.

Only that one file is loaded from the release wheel (scripts/install-tools.sh extracts it);
its imports from the rest of vLLM (config, logger, network utilities, the block-hash type)
are replaced by the small stand-ins below, so the publisher's own code (its PUB socket, its
replay ROUTER, its buffer and its msgspec encoding) is what runs.

    python scripts/peers/vllm_publisher.py --kv-events PATH/kv_events.py --workers 3 \
        --before 8 --after 12 --interval 0.02

For each worker it binds a PUB and a replay ROUTER on free loopback ports and prints one JSON
line {"pub": [...], "replay": [...]}. It publishes `--before` batches per worker (nobody is
subscribed yet: vLLM keeps them only in its replay buffer), prints {"paused": N}, and waits
for a line on standard input. Then it publishes `--after` more per worker, `--interval`
seconds apart, prints {"published": N}, and keeps answering replay requests until its
standard input closes. Each batch holds one BlockStored (GPU, block size 16) whose hash is
worker * 1_000_000 + seq + 1, so a reader can tell every batch apart.
"""

import argparse
import importlib.util
import json
import logging
import socket
import sys
import time
import types


def stub_vllm_imports():
    """Installs the modules kv_events.py imports from the rest of vLLM."""

    def module(name, **attrs):
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        sys.modules[name] = m
        return m

    class KVEventsConfig:  # a plain record of what the publisher reports about itself
        def __init__(self, **kwargs):
            self.__dict__.update(kwargs)

    for pkg in ["vllm", "vllm.config", "vllm.utils", "vllm.v1", "vllm.v1.core", "vllm.distributed"]:
        module(pkg).__path__ = []
    module("vllm.config.kv_events", KVEventsConfig=KVEventsConfig)
    module("vllm.logger", init_logger=logging.getLogger)
    module(
        "vllm.utils.network_utils",
        get_ip=lambda: "127.0.0.1",
        get_tcp_uri=lambda ip, port: f"tcp://{ip}:{port}",
        is_valid_ipv6_address=lambda ip: ":" in ip,
        split_zmq_path=lambda path: tuple(path.replace("tcp://", "tcp:").split(":")),
    )
    module("vllm.v1.core.kv_cache_utils", ExternalBlockHash=bytes | int)


def load_kv_events(path):
    stub_vllm_imports()
    spec = importlib.util.spec_from_file_location("vllm.distributed.kv_events", path)
    kv_events = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = kv_events
    spec.loader.exec_module(kv_events)
    return kv_events


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def say(obj):
    print(json.dumps(obj), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kv-events", required=True, help="vllm/distributed/kv_events.py of a release")
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--before", type=int, default=8, help="batches per worker before pausing")
    ap.add_argument("--after", type=int, default=12, help="batches per worker after the pause")
    ap.add_argument("--interval", type=float, default=0.02)
    ap.add_argument("--buffer-steps", type=int, default=10_000, help="vLLM's replay buffer length")
    args = ap.parse_args()

    kv = load_kv_events(args.kv_events)
    publishers, pubs, replays = [], [], []
    for _ in range(args.workers):
        port, replay = free_port(), f"tcp://127.0.0.1:{free_port()}"
        # vLLM binds its PUB only for a wildcard endpoint (its default is tcp://*:5557) and
        # connects otherwise; readers reach it on loopback.
        publishers.append(
            kv.ZmqEventPublisher(0, endpoint=f"tcp://*:{port}", replay_endpoint=replay, buffer_steps=args.buffer_steps)
        )
        pubs.append(f"tcp://127.0.0.1:{port}")
        replays.append(replay)
    say({"pub": pubs, "replay": replays})

    seqs = [0] * args.workers

    def publish_round():
        for w, p in enumerate(publishers):
            stored = kv.BlockStored(
                block_hashes=[w * 1_000_000 + seqs[w] + 1],
                parent_block_hash=None,
                token_ids=list(range(16)),
                block_size=16,
                lora_id=None,
                medium="GPU",
                lora_name=None,
                group_idx=0,
                kv_cache_spec_kind="full_attention",
            )
            p.publish(kv.KVEventBatch(ts=time.time(), events=[stored]))
            seqs[w] += 1

    for _ in range(args.before):
        publish_round()
    # The publisher thread sends asynchronously; let it drain into the replay buffer.
    deadline = time.time() + 10
    while any(p._event_queue.qsize() for p in publishers) and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    say({"paused": args.before})

    if not sys.stdin.readline():
        return
    for _ in range(args.after):
        publish_round()
        time.sleep(args.interval)
    say({"published": args.before + args.after})
    sys.stdin.read()
    for p in publishers:
        p.shutdown()


if __name__ == "__main__":
    main()
