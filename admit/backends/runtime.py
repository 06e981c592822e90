"""The half of each gang backend that talks to the API server, and its registry ``name -> interface.BackendAPI``.

Found by the plan's ``backend`` name as ``registry.BACKENDS`` is, through entry points of their own (group
``admit.gang_backend_apis``). Not pure: loading the API halves imports the API client, so the pure decisions never
import this module (pyproject.toml contracts).
"""

from __future__ import annotations

from .common import installed
from .interface import BackendAPI, GangDecide

__all__ = ["GROUP", "GangDecide", "BackendAPI", "APIS", "register", "unregister", "reload"]

GROUP = "admit.gang_backend_apis"


APIS: dict[str, BackendAPI] = installed(GROUP)
"""``name -> BackendAPI``: the installed ones (entry points of :data:`GROUP`: the built-ins' ``api.API``) and any
:func:`register` added (keys are ``registry.BACKENDS``')."""


def register(name: str, api: BackendAPI) -> None:
    """Add (or replace) the API half of backend ``name``."""
    APIS[name] = api


def unregister(name: str) -> None:
    """Remove an API half :func:`register` added (tests)."""
    APIS.pop(name, None)


def reload() -> None:
    """Read the installed entry points again (see ``registry.reload``)."""
    APIS.clear()
    APIS.update(installed(GROUP))
