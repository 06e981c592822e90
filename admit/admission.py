"""Admission orchestration: run the pure decisions, do the API work they ask for, within a deadline.

``mutate`` is pure and synchronous (``mutate.py``). ``validate`` runs ``validate.validate`` and then, where the
verdict asks for it, makes sure the PodGroup exists with the right spec or reads a scale request's parent.

Rules (DESIGN.md, "Known traps"):

- PodGroups are created at admission without an ownerReference (the garbage collector would delete a PodGroup
  whose owner is not stored yet); the controller adopts them later.
- 409 AlreadyExists on create is success: read the PodGroup, check who it belongs to
  (``podgroup.ownership``), patch its spec only where it differs.
- ``dryRun`` requests get the same answer and write nothing: writes are sent with ``dryRun=All`` so that
  kube-apiserver still validates them (``sideEffects: NoneOnDryRun``).
- All API calls of one request share one budget (``Config.api_timeout_seconds``); when the API fails, the
  failure mode decides: ``deny`` refuses with the reason (code 503), ``allow`` admits with a warning. A request never
  hangs past the budget.
- An unexpected error in admit's own code never becomes an HTTP 500: it is logged and answered like an API
  failure (mutations: allowed unchanged, with a warning).
- A Pod CREATE carrying the pod-group label costs one dict lookup in the cache when its group is known. When the
  group is missing from the cache and a stored workload claims it, the cache's ``missing`` hook asks the controller
  to re-create it (in the background) and the pod is allowed with a warning: never delayed, never denied.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

from .backends.ensure import ensure_workload_api
from .config import WORKLOAD_API, Config
from .kube import AlreadyExists, KubeError
from .mutate import mutate
from .plan import get_path
from .podgroup import desired_pod_group, ownership, spec_differs, spec_json_patch
from .review import AdmissionRequest, Decision
from .validate import ScaleCheck, Verdict, scale_decision, validate

__all__ = ["Admission", "PodGroupStore", "GroupCache"]

log = logging.getLogger("admit.admission")


class PodGroupStore(Protocol):
    """What admission needs from the Kubernetes API (``kube.KubeAPI``; ``offline.OfflineKube`` for ``admit review``).

    Each method takes ``timeout`` (seconds) and raises ``kube.KubeError`` on failure.
    """

    async def create_pod_group(self, body: dict[str, Any], dry_run: bool, timeout: float) -> dict[str, Any]: ...

    async def get_pod_group(self, namespace: str, name: str, timeout: float) -> dict[str, Any] | None: ...

    async def patch_pod_group(
        self, namespace: str, name: str, ops: list[dict[str, Any]], dry_run: bool, timeout: float
    ) -> dict[str, Any]: ...

    async def get_object(
        self, group: str, version: str, plural: str, namespace: str, name: str, timeout: float
    ) -> dict[str, Any] | None: ...


class GroupCache(Protocol):
    """A read view of the PodGroups admit knows (the controller's watch-backed cache).

    It may also have ``missing(namespace, name) -> str | None`` (``controller.PodGroupView``): called for a Pod
    CREATE whose group is not cached; returns the warning to add when admit is re-creating that group, else None.
    """

    def get(self, namespace: str, name: str) -> dict[str, Any] | None: ...


class Admission:
    """Answers ``/mutate`` and ``/validate`` requests.

    Args:
        config: settings.
        store: the Kubernetes API (``None``: decide only, create nothing, report the PodGroups that would be made).
        cache: PodGroups known from a watch (``None``: none); a cached PodGroup that admit manages with the right
            spec needs no API call.
    """

    def __init__(self, config: Config, store: PodGroupStore | None = None, cache: GroupCache | None = None) -> None:
        self.config = config
        self.store = store
        self.cache = cache
        self._missing = getattr(cache, "missing", None)

    def mutate(self, req: AdmissionRequest) -> Decision:
        """The ``/mutate`` decision; an internal error gives an allowed, unchanged answer with a warning."""
        try:
            return mutate(req, self.config, self.cache)
        except Exception:  # noqa: BLE001 - never fail pod creation on our own bug
            log.exception("mutate failed for %s %s/%s uid=%s", req.kind, req.namespace, req.name, req.uid)
            return Decision(warnings=["admit could not compute a mutation (internal error); the object is unchanged"])

    async def validate(self, req: AdmissionRequest) -> Decision:
        """The ``/validate`` decision, with PodGroup creation/patching and scale checks done."""
        verdict: Verdict | None = None
        try:
            verdict = validate(req, self.config)
            if verdict.ensure is not None:
                await self._ensure(verdict)
            elif verdict.scale is not None:
                return await self._check_scale(verdict.scale)
            elif self._missing is not None and req.kind == "Pod" and not req.dry_run:
                self._warn_missing_group(req, verdict.decision)
            return verdict.decision
        except KubeError as e:
            return self._api_failure(e.message, verdict.decision if verdict is not None else Decision())
        except Exception as e:  # noqa: BLE001 - never a 500
            log.exception("validate failed for %s %s/%s uid=%s", req.kind, req.namespace, req.name, req.uid)
            return self._api_failure(f"internal error in admit ({type(e).__name__})", Decision())

    def _warn_missing_group(self, req: AdmissionRequest, decision: Decision) -> None:
        if req.operation != "CREATE" or req.group != "" or not decision.allowed:
            return
        labels = get_path(req.object, ("metadata", "labels"))
        name = labels.get(self.config.pod_group_label) if isinstance(labels, dict) else None
        if not isinstance(name, str) or not name:
            return
        namespace = req.namespace or str(get_path(req.object, ("metadata", "namespace")) or "")
        if self.cache is None or self.cache.get(namespace, name) is not None:
            return
        warning = self._missing(namespace, name)  # type: ignore[misc]
        if warning:
            decision.warnings.append(warning)

    def _api_failure(self, reason: str, decision: Decision) -> Decision:
        log.warning("failure mode %s: %s", self.config.failure_mode, reason)
        if self.config.failure_mode == "allow":
            decision.warnings.append(f"admit could not finish its checks ({reason}); allowed by failure mode 'allow'")
            return decision
        return Decision.deny(
            f"admit could not finish its checks ({reason}); refused by failure mode 'deny' so that pods never wait on a "
            "missing PodGroup. Retry in a moment",
            503,
            decision.warnings,
        )

    async def _ensure(self, verdict: Verdict) -> None:
        plan = verdict.ensure
        assert plan is not None
        decision = verdict.decision
        if plan.backend == WORKLOAD_API:  # a Workload and its PodGroup (scheduling.k8s.io): admit/backends/ensure.py
            await ensure_workload_api(self.store, plan, self.config, decision, verdict.explicit_name,  # type: ignore
                                      verdict.dry_run, self.cache)
            return
        desired = desired_pod_group(plan, self.config)
        decision.pod_groups.append(desired)
        if self.cache is not None:
            cached = self.cache.get(plan.namespace, plan.group_name)
            if cached is not None:
                own = ownership(cached, plan, self.config, verdict.explicit_name)
                if own.action == "manage" and not spec_differs(cached, desired["spec"]):
                    return
        if self.store is None:
            return
        deadline = time.monotonic() + self.config.api_timeout_seconds

        def left() -> float:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KubeError(0, "Timeout", f"API budget of {self.config.api_timeout_seconds:.1f}s used up")
            return remaining

        ns, name = plan.namespace, plan.group_name
        try:
            created = await self.store.create_pod_group(desired, verdict.dry_run, left())
            log.info("%s PodGroup %s/%s for %s", "dry run: would create" if verdict.dry_run else "created", ns, name,
                     plan.ref)
            decision.pod_groups[-1] = created or desired
            return
        except AlreadyExists:
            pass
        existing = await self.store.get_pod_group(ns, name, left())
        if existing is None:  # deleted between our create and read: create once more
            await self.store.create_pod_group(desired, verdict.dry_run, left())
            return
        own = ownership(existing, plan, self.config, verdict.explicit_name)
        decision.warnings.extend(own.warnings)
        if own.action == "conflict":
            decision.allowed = False
            decision.code = 409
            decision.message = own.message
            return
        if own.action != "manage":
            decision.pod_groups[-1] = existing
            return
        if spec_differs(existing, desired["spec"]):
            ops = spec_json_patch(existing, desired["spec"])
            patched = await self.store.patch_pod_group(ns, name, ops, verdict.dry_run, left())
            log.info("patched PodGroup %s/%s spec for %s: %s", ns, name, plan.ref, ops)
            decision.pod_groups[-1] = patched or desired
        else:
            decision.pod_groups[-1] = existing

    async def _check_scale(self, check: ScaleCheck) -> Decision:
        if self.store is None:
            return Decision(warnings=[f"{check.kind} {check.namespace}/{check.name} not read: scale not checked"])
        parent = await self.store.get_object(
            check.group, check.version, check.plural, check.namespace, check.name, self.config.api_timeout_seconds
        )
        if parent is None:
            return Decision(warnings=[f"{check.kind} {check.namespace}/{check.name} not found: scale not checked "
                                      "against its gang minMember"])
        return scale_decision(parent, check, self.config)
