"""Admission-time API work of the ``coscheduling`` backend: make the gang's PodGroup exist with the right spec.

Rules (docs/behaviour.md, "On each request" and "The rules the code is built on"), applied by
:func:`ensure_coscheduling`:

- a PodGroup is created at admission without an ownerReference (the garbage collector would delete a PodGroup whose
  owner is not stored yet); the controller adopts it later;
- 409 AlreadyExists on create is success: read the PodGroup, check who it belongs to (``podgroup.ownership``),
  patch its spec only where it differs; a PodGroup bare pods share is never lowered by one more member
  (``podgroup.merge_shared_spec``);
- ``dryRun`` requests send every write with ``dryRun=All`` and store nothing;
- one budget (``Config.api_timeout_seconds``) for all calls of the request; a ``kube.KubeError`` goes back to
  ``Admission.validate``, which applies the failure mode.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from ...observability import metrics
from ...config import Config
from ...kube.client import AlreadyExists, Budget
from ...gang.plan import GangPlan
from .podgroup import (
    desired_pod_group, generation_patch, merge_shared_spec, ownership, spec_differs, spec_json_patch,
)

__all__ = ["PodGroupStore", "ensure_coscheduling"]

log = logging.getLogger("admit.admission")


class PodGroupStore(Protocol):
    """The PodGroup calls this needs (``kube.KubeAPI``; ``offline.OfflineKube`` for ``admit review``); each takes
    ``timeout`` (seconds) and raises ``kube.KubeError`` (``AlreadyExists`` for a 409 on create)."""

    async def create_pod_group(self, body: dict[str, Any], dry_run: bool, timeout: float) -> dict[str, Any]: ...

    async def get_pod_group(self, namespace: str, name: str, timeout: float) -> dict[str, Any] | None: ...

    async def patch_pod_group(
        self, namespace: str, name: str, ops: list[dict[str, Any]], dry_run: bool, timeout: float
    ) -> dict[str, Any]: ...


async def ensure_coscheduling(store: PodGroupStore | None, plan: GangPlan, config: Config, decision: Any,
                              explicit_name: bool, dry_run: bool, cache: Any = None,
                              generation: int | None = None) -> None:
    """Make ``plan``'s PodGroup exist with the right spec; record it in ``decision.pod_groups``.

    ``decision`` is the ``admissionreview.Decision`` to complete (a conflict turns it into a 409 denial, ownership
    warnings are added); ``store`` ``None`` only reports the desired PodGroup; ``cache`` (optional,
    ``.get(namespace, name) -> dict | None``) lets a known, managed, in-step PodGroup skip every call;
    ``generation``: the incoming object's ``metadata.generation`` (in the validating phase kube-apiserver has already
    bumped it for a spec change), stamped on what is written so the controller never writes back a spec from an
    older generation (``podgroup.generation_annotation``).

    Raises:
        kube.KubeError: an API call failed or the budget ran out.
    """
    desired = desired_pod_group(plan, config, generation)
    decision.pod_groups.append(desired)
    if cache is not None:
        cached = cache.get(plan.namespace, plan.group_name)
        if cached is not None:
            own = ownership(cached, plan, config, explicit_name)
            want, merge_warnings = merge_shared_spec(cached, plan) if plan.shared else (desired["spec"], [])
            if own.action == "manage" and not spec_differs(cached, want):
                decision.warnings.extend(merge_warnings)
                return
    if store is None:
        return
    left = Budget(config.api_timeout_seconds).left
    ns, name = plan.namespace, plan.group_name
    try:
        created = await store.create_pod_group(desired, dry_run, left())
        log.info("%s PodGroup %s/%s for %s", "dry run: would create" if dry_run else "created", ns, name,
                 plan.ref)
        decision.pod_groups[-1] = created or desired
        if not dry_run:
            metrics.pod_group("created")
        return
    except AlreadyExists:
        pass
    existing = await store.get_pod_group(ns, name, left())
    if existing is None:  # deleted between our create and read: create once more
        await store.create_pod_group(desired, dry_run, left())
        if not dry_run:
            metrics.pod_group("created")
        return
    members = getattr(cache, "group_pods", None)  # the controller's claims: other workloads naming this group
    others = members(ns, name, plan.owner) if members is not None else None
    own = ownership(existing, plan, config, explicit_name, others)
    decision.warnings.extend(own.warnings)
    if own.action == "conflict":
        decision.allowed = False
        decision.code = own.code
        decision.message = own.message
        return
    if own.action != "manage":
        decision.pod_groups[-1] = existing
        return
    want = desired["spec"]
    if plan.shared:  # bare pods: no member lowers what another member set
        want, merge_warnings = merge_shared_spec(existing, plan)
        decision.warnings.extend(merge_warnings)
    if spec_differs(existing, want):
        ops = spec_json_patch(existing, want) + generation_patch(existing, generation, config)
        patched = await store.patch_pod_group(ns, name, ops, dry_run, left())
        log.info("patched PodGroup %s/%s spec for %s: %s", ns, name, plan.ref, ops)
        if not dry_run:
            metrics.pod_group("patched")
        decision.pod_groups[-1] = patched or desired
    else:
        decision.pod_groups[-1] = existing
