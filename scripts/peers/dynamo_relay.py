#!/usr/bin/env python3
"""Runs NVIDIA Dynamo 1.6.1's own KV-event relay (`KvEventPublisher` from ai-dynamo-runtime)
on loopback, fed by a ZMQ PUB of engine payloads, for kvscope's event-plane tests.

    python scripts/peers/dynamo_relay.py --plane nats --nats nats://127.0.0.1:PORT \
        --worker-id 42 --block-size 16 PAYLOAD.msgpack ...

It binds an XPUB on a free loopback port (the "engine") and prints {"engine": "tcp://..."};
starts `DistributedRuntime(loop, "mem"|"file"|"etcd", "tcp", event_plane=...)` (`--discovery`;
etcd at `--etcd`, the file backend in `--file-kv` or a new temporary directory) and a
`KvEventPublisher(endpoint, worker_id, kv_block_size, dp_rank, zmq_endpoint=engine,
zmq_topic="")` relaying it; on the ZMQ plane (`DYN_EVENT_PLANE_HOST=127.0.0.1`, file discovery
under `DYN_FILE_KV`) it prints {"event_plane": "zmq://HOST:PORT"} read from the discovery
record of the event channel. It prints {"ready": true}, waits until the XPUB has `--subscribers`
subscriptions and a line arrives on standard input, then publishes each payload file as
`[b"", seq u64 BE, payload]` `--interval` seconds apart (seq from 0, repeated `--repeat` times),
prints {"published": N}, and keeps the relay up until standard input closes.

With `--engine tcp://HOST:PORT` it relays an engine someone else binds (a test that kills the
relay while the engine keeps publishing): no XPUB, no payload files; it prints {"ready": true}
and relays until standard input closes or it is killed.

NATS must be up first: with no NATS reachable the runtime's constructor retries for up to 120 s.
"""

import argparse
import asyncio
import atexit
import glob
import json
import os
import shutil
import sys
import tempfile
import threading
import time


def say(**kv):
    print(json.dumps(kv), flush=True)


def discovered_endpoint(root, deadline):
    while time.time() < deadline:
        for path in glob.glob(os.path.join(root, "**", "*"), recursive=True):
            if not os.path.isfile(path):
                continue
            try:
                record = json.loads(open(path, "rb").read())
            except (ValueError, OSError):
                continue
            if isinstance(record, dict) and record.get("type") == "EventChannel":
                ep = record.get("transport", {}).get("config", {}).get("endpoint", "")
                if ep.startswith("tcp://"):
                    return "zmq://" + ep[len("tcp://"):]
        time.sleep(0.05)
    raise SystemExit("no EventChannel discovery record under " + root)


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plane", choices=["nats", "zmq"], required=True)
    ap.add_argument("--nats", help="nats://127.0.0.1:PORT (NATS_SERVER)")
    ap.add_argument("--worker-id", type=int, default=42)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--dp-rank", type=int, default=0)
    ap.add_argument("--namespace", default="dynamo")
    ap.add_argument("--subscribers", type=int, default=2)
    ap.add_argument("--interval", type=float, default=0.01)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--engine", help="relay this engine endpoint instead of binding one")
    ap.add_argument(
        "--discovery",
        choices=["mem", "file", "etcd"],
        help="Dynamo's discovery backend (default: file on the ZMQ plane, mem on NATS)",
    )
    ap.add_argument("--file-kv", help="the file backend's directory (DYN_FILE_KV); default: a new temporary one")
    ap.add_argument("--etcd", help="etcd's client URL for --discovery etcd (ETCD_ENDPOINTS), e.g. http://127.0.0.1:2379")
    ap.add_argument("payloads", nargs="*")
    args = ap.parse_args()
    if not args.engine and not args.payloads:
        ap.error("give payload files, or --engine to relay an engine bound elsewhere")

    import zmq

    ctx = zmq.Context()
    xpub = None
    if args.engine:
        engine = args.engine
    else:
        xpub = ctx.socket(zmq.XPUB)
        xpub.setsockopt(zmq.XPUB_VERBOSE, 1)  # count every subscriber, not every distinct topic
        port = xpub.bind_to_random_port("tcp://127.0.0.1")
        engine = f"tcp://127.0.0.1:{port}"
        say(engine=engine)

    if args.nats:
        os.environ["NATS_SERVER"] = args.nats
    discovery = args.discovery or ("file" if args.plane == "zmq" else "mem")
    if args.plane == "zmq":
        os.environ["DYN_EVENT_PLANE_HOST"] = "127.0.0.1"
    root = None
    if discovery == "file":
        root = args.file_kv
        if root is None:
            root = tempfile.mkdtemp(prefix="kvscope-dyn-kv-")
            # Removed on a normal exit; a relay a test SIGKILLs leaves it in the temp directory.
            atexit.register(shutil.rmtree, root, True)
        os.environ["DYN_FILE_KV"] = root
    if discovery == "etcd":
        if not args.etcd:
            ap.error("--discovery etcd needs --etcd http://HOST:PORT")
        os.environ["ETCD_ENDPOINTS"] = args.etcd

    from dynamo._core import DistributedRuntime, KvEventPublisher

    loop = asyncio.get_running_loop()
    runtime = DistributedRuntime(loop, discovery, "tcp", event_plane=args.plane)
    endpoint = runtime.endpoint(f"{args.namespace}.backend.generate")
    publisher = KvEventPublisher(
        endpoint,
        worker_id=args.worker_id,
        kv_block_size=args.block_size,
        dp_rank=args.dp_rank,
        zmq_endpoint=engine,
        zmq_topic="",
    )
    if args.plane == "zmq" and root is not None:
        say(event_plane=discovered_endpoint(root, time.time() + 30))
    say(ready=True)

    if xpub is None:
        # External engine: relay until standard input closes (or SIGKILL).
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        del publisher
        runtime.shutdown()
        return

    payloads = [open(p, "rb").read() for p in args.payloads]
    subscribed = 0
    poller = zmq.Poller()
    poller.register(xpub, zmq.POLLIN)
    go = threading.Event()
    closed = threading.Event()

    def stdin_reader():
        if sys.stdin.readline():
            go.set()
        for _ in sys.stdin:
            pass
        closed.set()
        go.set()

    threading.Thread(target=stdin_reader, daemon=True).start()
    while subscribed < args.subscribers or not go.is_set():
        if dict(poller.poll(50)).get(xpub):
            if xpub.recv()[:1] == b"\x01":
                subscribed += 1
        await asyncio.sleep(0)
        if closed.is_set():
            return
    await asyncio.sleep(0.2)
    seq = 0
    for _ in range(args.repeat):
        for payload in payloads:
            xpub.send_multipart([b"", seq.to_bytes(8, "big"), payload])
            seq += 1
            await asyncio.sleep(args.interval)
    say(published=seq)
    while not closed.is_set():
        await asyncio.sleep(0.1)
    del publisher
    runtime.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
