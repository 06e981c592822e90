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


ASYNCIO_TLS_READ_BUFFER = 32 * 1024
"""Bytes of the read buffer asyncio's TLS layer keeps per connection (``asyncio.sslproto.SSLProtocol.max_size``,
256 KiB in CPython 3.11-3.13). Two TLS records (16 KiB each) per read are plenty for AdmissionReviews; the default
made each idle TLS connection of a plain install cost about 280 KiB of RSS (issue 15: 4,000 of them took the server
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
