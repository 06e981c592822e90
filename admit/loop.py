"""The event loop ``admit serve`` runs on: uvloop when installed (extra ``fast``), else the stdlib asyncio loop.

uvloop does the TLS record layer and socket I/O in C instead of asyncio's pure-Python ``sslproto``, which is most of
the per-request cost of a small HTTPS answer (see ``README.md, Performance``). Set ``ADMIT_EVENT_LOOP=asyncio`` to
run on the stdlib loop even where uvloop is installed; the stdlib path is always available and tested.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, Coroutine, TypeVar

__all__ = ["loop_name", "run", "ENV_VAR"]

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
