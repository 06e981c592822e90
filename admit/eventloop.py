"""The event loop ``admit serve`` runs on: uvloop when installed (extra ``fast``), else the stdlib asyncio loop.

uvloop does the TLS record layer and socket I/O in C instead of asyncio's pure-Python ``sslproto``, which is most of
the per-request cost of a small HTTPS answer (see ``docs/performance.md``). Set ``ADMIT_EVENT_LOOP=asyncio`` to
run on the stdlib loop even where uvloop is installed; the stdlib path is always available and tested.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Coroutine, TypeVar

__all__ = ["loop_name", "run", "ENV_VAR", "Pacer"]

ENV_VAR = "ADMIT_EVENT_LOOP"
"""Environment variable: ``asyncio`` forces the stdlib loop, ``uvloop`` (or unset) uses uvloop when importable."""

T = TypeVar("T")


def _uvloop() -> Any:
    if os.environ.get(ENV_VAR, "").strip().lower() == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop


def loop_name() -> str:
    """``"uvloop"`` or ``"asyncio"``: the loop :func:`run` will use."""
    return "uvloop" if _uvloop() is not None else "asyncio"


ASYNCIO_TLS_READ_BUFFER = 32 * 1024
"""Bytes of the read buffer asyncio's TLS layer keeps per connection (``asyncio.sslproto.SSLProtocol.max_size``,
256 KiB in CPython 3.11-3.13). Two TLS records (16 KiB each) per read are plenty for AdmissionReviews; the default
made each idle TLS connection of a plain install cost about 280 KiB of RSS (measured: 4,000 of them took the server
to 1,194 MiB)."""


def _small_asyncio_tls_buffers() -> None:
    sslproto = getattr(asyncio, "sslproto", None)
    protocol = getattr(sslproto, "SSLProtocol", None)
    if protocol is not None and getattr(protocol, "max_size", 0) > ASYNCIO_TLS_READ_BUFFER:
        protocol.max_size = ASYNCIO_TLS_READ_BUFFER


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on a new loop of the kind :func:`loop_name` names (like ``asyncio.run``).

    On the stdlib loop, asyncio's per-connection TLS read buffer is made :data:`ASYNCIO_TLS_READ_BUFFER` bytes first.
    """
    uvloop = _uvloop()
    if uvloop is None:
        _small_asyncio_tls_buffers()
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


class Pacer:
    """Give the event loop back during a long synchronous walk (a relist's handler calls, a resync, a work queue).

    ``await pacer.tick()`` after each item: it yields (``asyncio.sleep(0)``) once ``slice_seconds`` have passed since
    the last yield, so admissions waiting on the same loop wait at most about one slice (default 5 ms) instead of
    the whole walk. Cheap when it does not yield: one ``time.perf_counter()`` call.

    Attributes:
        yields: how many times it gave the loop back (tests, benchmarks).
    """

    __slots__ = ("slice_seconds", "_since", "yields")

    def __init__(self, slice_seconds: float = 0.005) -> None:
        self.slice_seconds = slice_seconds
        self._since = time.perf_counter()
        self.yields = 0

    async def tick(self) -> None:
        now = time.perf_counter()
        if now - self._since >= self.slice_seconds:
            await asyncio.sleep(0)
            self.yields += 1
            self._since = time.perf_counter()
