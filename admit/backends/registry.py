"""The registry of gang backends: ``name -> interface.GangBackend``. Pure.

A value built from the built-in backends' folders (each exports ``BACKEND``); a backend defined elsewhere joins
with :func:`register` (tests/backends/volcano.py does). The API halves have their own registry beside it
(``runtime.APIS``), so that the pure decisions can look a backend up without importing the API client.
"""

from __future__ import annotations

from typing import Any

from . import coscheduling, workload_api
from .interface import GangBackend

__all__ = ["BACKENDS", "backend_of", "hooks", "hook_of", "register", "unregister"]

BACKENDS: dict[str, GangBackend] = {b.name: b for b in (coscheduling.BACKEND, workload_api.BACKEND)}
"""``name -> backend``: the built-ins (each folder's ``BACKEND``) and any :func:`register` added."""


def backend_of(name: str) -> GangBackend:
    """The backend called ``name``. Raises KeyError for a name nobody registered (``apply_backend`` refuses such a
    plan before anything asks)."""
    return BACKENDS[name]


_HOOKS: dict[Any, Any] = {}
"""``hook -> (bound methods)`` and ``(name, hook) -> bound method | None``, found once per registry change."""


def hooks(hook: str) -> tuple[Any, ...]:
    """The optional method ``hook`` (``interface.BackendHooks``) of every registered backend that has it, in
    registry order: a dict lookup after the first call, so the hot path asks no backend that lacks it."""
    found = _HOOKS.get(hook)
    if found is None:
        found = _HOOKS[hook] = tuple(m for b in BACKENDS.values() if (m := getattr(b, hook, None)) is not None)
    return found


def hook_of(name: str, hook: str) -> Any:
    """The optional method ``hook`` of backend ``name``, or ``None`` (no such backend, or it has none)."""
    key = (name, hook)
    if key not in _HOOKS:
        _HOOKS[key] = getattr(BACKENDS.get(name), hook, None)
    return _HOOKS[key]


def register(backend: GangBackend) -> None:
    """Add (or replace) a backend under ``backend.name``."""
    BACKENDS[backend.name] = backend
    _HOOKS.clear()


def unregister(name: str) -> None:
    """Remove a backend :func:`register` added (tests)."""
    BACKENDS.pop(name, None)
    _HOOKS.clear()
