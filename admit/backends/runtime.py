"""The half of each gang backend that talks to the API server, and the registry ``name -> BackendAPI``.

:class:`BackendAPI` is what the controller runs for the backend's gangs (``decide``, by default ``gangobjects.decide_objects``,
run by the backend's gang controller, ``admit/controller/gangs.py``), what ``admit
status`` runs to explain them (``status``, ``admit/backends/status.py``) and the metric its writes count in
(``count``). Admission makes every backend's objects with one engine, ``admit/backends/ensure.py``. The pure half is
``interface.GangBackend``; both are found by the plan's ``backend`` name. Not pure: the status parts import the API
client (``kube.client``), so the pure decisions never import this module (pyproject.toml contracts).
"""

from __future__ import annotations

from .common import installed
from .interface import BackendAPI, GangDecide

__all__ = ["GROUP", "GangDecide", "BackendAPI", "APIS", "api_of", "register", "unregister", "reload"]

GROUP = "admit.gang_backend_apis"


APIS: dict[str, BackendAPI] = installed(GROUP)
"""``name -> BackendAPI``: the installed ones (entry points of :data:`GROUP`: the built-ins' ``api.API``) and any
:func:`register` added (keys are ``registry.BACKENDS``')."""


def api_of(name: str) -> BackendAPI:
    """The API half of backend ``name`` (KeyError when none is registered)."""
    return APIS[name]


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
