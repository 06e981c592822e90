"""``python -m admit.testing.fake_kube``: the fake API as a process (bench/, docs/performance.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from typing import Iterable

from .resources import FIRST_ALPHA, WORKLOAD_API_VERSIONS
from .server import FakeKubeAPI


async def _serve_forever(args: argparse.Namespace) -> None:
    api = FakeKubeAPI(gc_orphans_after=args.gc_orphans_after, record_requests=args.record_requests,
                      workload_api=args.workload_api, bookmark_interval=args.bookmark_interval)
    if args.latency:
        api.delay("*", "*", args.latency)
    await api.start(args.port)
    print(api.url, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await api.stop()


def main(argv: Iterable[str] | None = None) -> int:
    """``python -m admit.testing.fake_kube [--port N] [--latency S] [--gc-orphans-after S] [--record-requests]``:
    print the URL on stdout and serve on 127.0.0.1 until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(prog="python -m admit.testing.fake_kube", description=main.__doc__)
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: a free one)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds to sleep before answering any request")
    parser.add_argument("--gc-orphans-after", type=float, default=None,
                        help="seconds before objects with only missing owners are deleted (off by default)")
    parser.add_argument("--bookmark-interval", type=float, default=None, help="seconds between watch bookmarks")
    parser.add_argument("--record-requests", action="store_true",
                        help="keep the full request log (GET /_fake/requests); counters are always kept")
    parser.add_argument("--workload-api", choices=(*WORKLOAD_API_VERSIONS, FIRST_ALPHA), default=None,
                        help="also serve scheduling.k8s.io Workload and PodGroup in this version")
    args = parser.parse_args(list(argv) if argv is not None else None)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_forever(args))
    return 0


sys.exit(main())
