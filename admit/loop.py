"""The event loop ``admit serve`` runs on: uvloop when installed (extra ``fast``), else the stdlib asyncio loop.

uvloop does the TLS record layer and socket I/O in C instead of asyncio's pure-Python ``sslproto``, which is most of
the per-request cost of a small HTTPS answer (see ``README.md, Performance``). Set ``ADMIT_EVENT_LOOP=asyncio`` to
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


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on a new loop of the kind :func:`loop_name` names (like ``asyncio.run``)."""
    uvloop = _uvloop()
    if uvloop is None:
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
