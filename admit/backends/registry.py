"""The registry of gang backends: ``name -> interface.GangBackend``. Pure.

A value built from the built-in backends' folders (each exports ``BACKEND``); a backend defined elsewhere joins
with :func:`register` (tests/backends/volcano.py does). The API halves have their own registry beside it
(``runtime.APIS``), so that the pure decisions can look a backend up without importing the API client.
"""

from __future__ import annotations

from . import coscheduling, workload_api
from .interface import GangBackend

__all__ = ["BACKENDS", "backend_of", "register", "unregister"]

BACKENDS: dict[str, GangBackend] = {b.name: b for b in (coscheduling.BACKEND, workload_api.BACKEND)}
"""``name -> backend``: the built-ins (each folder's ``BACKEND``) and any :func:`register` added."""


def backend_of(name: str) -> GangBackend:
    """The backend called ``name``. Raises KeyError for a name nobody registered (``apply_backend`` refuses such a
    plan before anything asks)."""
    return BACKENDS[name]


def register(backend: GangBackend) -> None:
    """Add (or replace) a backend under ``backend.name``."""
    BACKENDS[backend.name] = backend


def unregister(name: str) -> None:
    """Remove a backend :func:`register` added (tests)."""
    BACKENDS.pop(name, None)
