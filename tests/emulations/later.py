"""The writes an operator, its autoscaler or a Kubernetes controller sends to a workload after its CREATE, in normal
operation ("later writes"), registered per operator emulation for the invariant of tests/operators/test_later_writes.py:
once admit has allowed a workload, every later write of its emulation is allowed, and every pod then made joins a
gang that can form.

An emulation joins by giving its module a module-level ``LATER`` (an :class:`Emulated`) and its name to
:data:`MODULES`; :func:`registry` imports them. Each :class:`LaterWrite` names the upstream file, function and
version it follows and what turns it on (feature gates, operator flags, fields), and sends its writes through the
fake's admission chain as the component that sends them. Like the emulations, this module imports nothing of
admit's decisions (``admit.families``, ``admit.gang``, ``admit.backends``, ``admit.webhook``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

__all__ = ["LaterWrite", "Emulated", "MODULES", "registry"]

JSON = dict[str, Any]

#: The emulation modules (of this package) that register later writes.
MODULES: tuple[str, ...] = ("kuberay", "lws", "jobset", "trainer", "spark", "kubeflow", "builtin", "mpi", "scheduled",
                            "argo")


@dataclass(frozen=True, slots=True)
class LaterWrite:
    """One kind of later write.

    Attributes:
        name: what it is, as an operator's user would say it (``"autoscaler scale-down to minReplicas"``).
        source: the upstream file, function and version it follows.
        enabled_by: the feature gates, flags and fields that turn it on (and their defaults).
        applies: ``applies(user_object) -> bool``: the write happens to a workload written so (its manifest; a
            ``List`` when the user applies several objects, in that order: a Deployment and its HPA).
        send: ``await send(operator, user_object)``: send it (and whatever follows from it) through the fake's
            admission chain and wait until the emulations are idle; refusals are kept, not raised
            (:attr:`Emulated.refused`).
    """

    name: str
    source: str
    enabled_by: str
    applies: Callable[[JSON], bool]
    send: Callable[[Any, JSON], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Emulated:
    """An operator emulation's part of the invariant.

    Attributes:
        name: the emulation (its module's name).
        install: ``install(fake, chain, **options) -> operator``, the module's own.
        kinds: ``(apiVersion, kind)`` of the user objects it acts on.
        writes: its later writes.
        gangs: ``gangs(operator, user_object) -> [(what, pods), ...]``: the pods of each gang the object has now
            (one entry per object that should be one gang: a RayCluster).
        refused: ``refused(operator) -> [(namespace, object, message), ...]``: every write of the operator (and of
            the components it runs, an autoscaler) refused so far.
        controller: admit's controller runs too, and the gangs need only form once it has acted (Argo's pod GC
            deletes pods whose success only the controller saw).
    """

    name: str
    install: Callable[..., Any]
    kinds: tuple[tuple[str, str], ...]
    writes: tuple[LaterWrite, ...]
    gangs: Callable[[Any, JSON], list[tuple[str, list[JSON]]]]
    refused: Callable[[Any], list[tuple[str, str, str]]]
    controller: bool = False


def registry() -> dict[str, Emulated]:
    """``{name: Emulated}`` of every module of :data:`MODULES` (its ``LATER``)."""
    out = {}
    for name in MODULES:
        module = importlib.import_module(f"{__package__}.{name}")
        out[name] = module.LATER
    return out
