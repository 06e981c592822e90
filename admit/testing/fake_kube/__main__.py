"""``python -m admit.testing.fake_kube``: the fake API as a process (bench/, docs/performance.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from typing import Iterable

from .server import FakeKubeAPI


async def _serve_forever(args: argparse.Namespace) -> None:
    api = FakeKubeAPI(record_requests=False, bookmark_interval=args.bookmark_interval)
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
    """``python -m admit.testing.fake_kube [--port N] [--bookmark-interval S]``: print the URL on stdout and serve on
    127.0.0.1 until SIGTERM/SIGINT; ``/_fake/stats`` counts the requests (the request log is not kept)."""
    parser = argparse.ArgumentParser(prog="python -m admit.testing.fake_kube", description=main.__doc__)
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: a free one)")
    parser.add_argument("--bookmark-interval", type=float, default=None, help="seconds between watch bookmarks")
    args = parser.parse_args(list(argv) if argv is not None else None)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_forever(args))
    return 0


sys.exit(main())
