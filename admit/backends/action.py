"""The controller's one decision record: :class:`Action`, what to do for one object of a gang (returned by
``backends/gangobjects.py`` ``decide_objects``, carried out by ``controller/gangs.py``). Pure.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from ..gang.claim import Claim

__all__ = ["Action"]

JSON = dict[str, Any]


@dataclass(slots=True)
class Action:
    """One thing to do for one object of a gang (every field but ``kind`` is a keyword).

    Attributes:
        kind: what to do:

            - ``"none"``: nothing (``message`` may say why: the workload or the object is being deleted, or the
              object is used as it is, ``"use"`` / ``"operator"``);
            - ``"create"``: POST ``body`` (``changes`` describes its spec or size);
            - ``"patch"``: a JSON patch ``ops`` (ending with the ``resourceVersion`` test the decision was made
              on); ``adopt`` when it sets the controller ownerReference, ``changes`` when it changes the spec;
            - ``"delete"``: delete the object (``uid``: the delete precondition, where the decision knows it);
            - ``"wait"``: look again in ``delay`` seconds (an unclaimed object within the grace period, or a
              PodGroup written from a newer workload generation than the cached one, ``ahead``);
            - ``"conflict"`` (the name belongs to something else), ``"invalid"`` (the workload's gang annotations
              are invalid), ``"foreign"`` (managed-looking, without a valid owner annotation: never touched),
              ``"immutable"`` (a size the object cannot follow) and ``"priority"`` (a ``priorityClassName`` /
              ``preemptionPolicy`` it cannot follow): report ``message``, write nothing.
        object_kind: the object's kind (``"Workload"``, ``"PodGroup"``); ``""`` for a decision about the whole gang.
        claim: the :class:`admit.gang.claim.Claim` acted for (``None`` for orphans).
        body: the object to create (``"create"``).
        ops: the JSON patch (``"patch"``).
        uid: the object's ``metadata.uid`` (``"delete"``), or ``None``.
        adopt: the patch sets the controller ownerReference to the claiming workload.
        changes: human list of what the write changes (``["minMember 3 -> 5"]``), for logs and Events.
        delay: seconds to wait (``"wait"``).
        message: what to report (the reporting kinds, ``"delete"``'s reason, ``"wait"``'s reason when ``ahead``).
        unclaimed: no stored workload claims the object (grace-period bookkeeping: when it was first seen so).
        ahead: the object was written by the webhook ahead of the cached workload (``common.ahead_of``;
            bookkeeping like ``unclaimed``).
        others: other claims on the same name, each with the message that says why it is ignored.
    """

    kind: str
    _: KW_ONLY
    object_kind: str = ""
    claim: Claim | None = None
    body: JSON | None = None
    ops: list[JSON] = field(default_factory=list)
    uid: str | None = None
    adopt: bool = False
    changes: list[str] = field(default_factory=list)
    delay: float = 0.0
    message: str = ""
    unclaimed: bool = False
    ahead: bool = False
    others: list[tuple[Claim, str]] = field(default_factory=list)
