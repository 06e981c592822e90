"""The pure reconcile decision for a ``workload-api`` gang: (Workload, PodGroup, claims, clock) -> actions; the
rules are every backend's (``admit/backends/gangobjects.py``), applied to this backend's two objects.

The same life as a scheduler-plugins PodGroup (``admit/controller/podgroups.py``; docs/behaviour.md, "The
garbage-collector race"), for the two scheduling.k8s.io objects of one gang, keyed ``(namespace, name)`` (both objects
carry the gang's name):

- **adopt**: once the workload is stored, give each object a controller ownerReference to it (its ``uid``,
  ``blockOwnerDeletion: true``), so the garbage collector deletes both with the workload;
- **keep in step**: a changed minMember is a JSON patch of ``minCount`` in v1beta1; in v1alpha2 ``minCount`` is
  immutable and a PodGroup cannot be re-created under its pods (``podgroup-protection`` finalizer), so the objects
  stay and the workload gets a Warning event (``"immutable"``); a missing object is created again, directly with
  its ownerReference (the workload is stored: no race);
- **clean up**: managed objects that no stored workload claims for the grace period are deleted (the loop first
  checks that no live pod still names the PodGroup);
- objects admit did not make are used (named explicitly), left to the workload's own controller, or reported as a
  conflict, by ``workload_api.ownership``; managed-looking objects without a valid owner annotation are left alone.

Claims are ``controller.Claim``-shaped (``plan``, ``workload``, ``identity``, ``uid``, ``ref``, ``deleting``,
``explicit``, ``meta``, ``key``): the stored gang workloads whose plan uses the ``workload-api`` backend.
"""

from __future__ import annotations

from typing import Any

from ...config import Config
from ...gang.ownerrefs import owner_reference
from ..common import object_owner
from ..action import Action
from ..gangobjects import decide_objects
from . import BACKEND, KIND_PLURALS

__all__ = ["KINDS", "decide_native", "owner_reference", "object_owner"]

JSON = dict[str, Any]
KINDS = tuple(KIND_PLURALS)  # creation order: the PodGroup references the Workload

def decide_native(key: tuple[str, str], objects: dict[str, JSON | None], claims: list[Any], config: Config, *,
                  now: float, unclaimed_since: float | None, grace: float,
                  ahead_since: float | None = None) -> list[Action]:
    """What to do for the gang ``key``: ``gangobjects.decide_objects`` with this backend.

    Args:
        key: ``(namespace, name)`` of the gang's Workload and PodGroup.
        objects: ``{"Workload": obj | None, "PodGroup": obj | None}`` as last seen.
        claims: stored workload-api gang workloads whose plan names ``key``, plus those whose identity is the
            objects' owner annotation (a workload whose annotations became invalid still protects its gang).
        now / unclaimed_since: seconds on one monotonic clock (``unclaimed_since``: first seen unclaimed).
        grace: orphan grace period, seconds (and how long objects written ahead of the workload wait,
            ``ahead_since``: when that was first seen).

    Returns: one action per object that needs one, in creation order (empty list: nothing to do).
    """
    return decide_objects(BACKEND, key, objects, claims, config, now=now, unclaimed_since=unclaimed_since,
                          grace=grace, ahead_since=ahead_since)
