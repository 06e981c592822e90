"""The registry of gang backends: ``name -> interface.GangBackend``. Pure.

Every backend, the built-ins too, is an entry point of group ``admit.gang_backends`` (pyproject.toml:
``coscheduling = "admit.backends.coscheduling:BACKEND"``), loaded once at import (``common.installed``): a package
that ships a backend declares its own, and ``--gang-backend``, ``--extra-gang-backend``, the ``<prefix>/backend``
annotation and the chart then take its name. A backend defined in a test joins with :func:`register`. The API halves
have their own registry (``runtime.APIS``), so that the pure decisions never import the API client.
"""

from __future__ import annotations

from typing import Any

from .common import installed
from .interface import GangBackend

__all__ = ["GROUP", "BACKENDS", "backend_of", "hooks", "named_hooks", "hook_of", "register", "unregister", "reload"]

GROUP = "admit.gang_backends"

BACKENDS: dict[str, GangBackend] = installed(GROUP)
"""``name -> backend``: the installed ones (the built-ins: each folder's ``BACKEND``) and any :func:`register` added."""


def backend_of(name: str) -> GangBackend:
    """The backend called ``name``; KeyError for an unregistered one (``apply_backend`` refuses such a plan first)."""
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


def named_hooks(hook: str) -> tuple[tuple[str, Any], ...]:
    """``((backend name, bound method), ...)`` of :func:`hooks`, for a caller that goes on to the named backend's API
    half (``runtime.APIS``); the same cache."""
    key = (hook,)  # a 1-tuple: apart from hooks()' strings and hook_of()'s pairs
    found = _HOOKS.get(key)
    if found is None:
        found = _HOOKS[key] = tuple((n, m) for n, b in BACKENDS.items() if (m := getattr(b, hook, None)) is not None)
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


def reload() -> None:
    """Read the installed entry points again (a package installed since, a test's simulated one); what
    :func:`register` added goes."""
    BACKENDS.clear()
    BACKENDS.update(installed(GROUP))
    _HOOKS.clear()
