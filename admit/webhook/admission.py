"""Admission orchestration: run the pure decisions, do the API work they ask for, within a deadline.

``mutate`` is pure (``mutate.py``); ``validate`` runs ``validate.validate`` and then does the work its verdict asks
for: the gang's objects (``backends.ensure``, with the rules of those writes and their one budget), a scale
request's parent, the kind's admission-time read. Rules (docs/behaviour.md, "On each request" and "The rules the
code is built on"):

- When the API fails, the failure mode decides (``deny``: 503 with the reason; ``allow``: admitted with a warning).
- A create answered 404 (``kube.resource_not_served``) is no passing failure when the backend says so
  (``GangBackend.not_served_problem``, or what ``admit serve`` found at start, :attr:`Admission.problems`): the
  message names the CRD and the fix and no "retry". A backend whose served version may have moved finds it again
  (:attr:`Admission.rediscoveries`).
- A create refused because the namespace is being deleted (``kube.namespace_terminating``) is allowed with a
  warning, whatever the failure mode (a refusal would hold the namespace in Terminating).
- An exception from admit's own code is a bug (:func:`_bug`): never an HTTP 500 nor "transient"; a mutation is
  answered allowed and unchanged with a warning, a validation by the failure mode (``deny``: ``status.code`` 500).
- A Pod CREATE that names a group with a backend's key and carries no gang annotations costs a dict lookup or two
  when its group is cached (:meth:`Admission._unknown_group`); a miss gets at most a warning, never a refusal;
  only with the controller's caches, never for a dry run.
- A ``*/scale`` UPDATE reads its parent from the controller's cache of gang workloads (``GroupCache.workload``): a
  parent absent from a listed cache is no gang. Without a listed cache the parent is read live, and a failed read
  refuses (failure mode) only a known gang (``GroupCache.gang_object``). An ``auto`` gang's objects are resized in
  the same admission.
- A pod whose group only another pod tells gets that pod read once per uid (:meth:`Admission.finish_mutation`).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from ..observability import metrics
from ..backends.ensure import ObjectStore, ensure
from ..config import Config
from ..echo import clip
from ..kube.client import KubeError, namespace_terminating, resource_not_served
from ..backends.registry import BACKENDS, backend_of, named_hooks
from ..backends.runtime import APIS
from .mutate import mutate, plan_patch
from ..gang.plan import get_path
from ..backends.common import owner_annotation
from .admissionreview import AdmissionRequest, Decision
from ..families.shared import PodRead, Read
from .validate import ScaleCheck, Verdict, add_overhead, autoscaler_refusal, drop_uncountable, scale_verdict, validate

__all__ = ["Admission", "Store", "GroupCache", "parent_not_found"]

log = logging.getLogger("admit.admission")


class Store(ObjectStore, Protocol):
    """What admission needs from the Kubernetes API (``kube.KubeAPI``; ``review.OfflineKube`` for ``admit review``):
    the generic object calls (``backends.ensure.ObjectStore``); optional: ``async get_pod(namespace, name, timeout)
    -> dict | None`` (a pod joiner's read, ``shared.PodRead``). Each takes ``timeout`` (seconds) and raises
    ``kube.KubeError`` on failure."""


class GroupCache(Protocol):
    """A read view of the PodGroups admit knows (the controller's watch-backed cache).

    Optional methods (``cacheview.ControllerView`` has them all; each is a dict lookup, never an API call):

    - ``missing(namespace, name) -> str | None``: the warning for a Pod CREATE whose group is not cached when admit
      is re-creating it (``GangController.missing``); without it no Pod CREATE is checked for a missing group;
    - ``pod_group(namespace, name) -> (synced, PodGroup | None)``: any PodGroup, managed by admit or not;
    - ``gang_object(group, kind, namespace, name) -> object | None``: a cached object of a gang backend, keyed by
      API group and kind (``backends.ensure`` skips every call for one that is ours and in step);
    - ``group_pods(namespace, name, exclude) -> int | None``: the pods of the other stored workloads that name a
      group;
    - ``workload(group, version, plural, kind, namespace, name) -> (synced, object | None)``: a stored gang
      workload (one admit labelled ``gang.admit.dev/managed``), and whether that kind's cache has listed;
    - ``extended_resources()`` / ``runtime_overheads()``: ``{extended resource name: DeviceClass name}`` served
      through DRA; ``{RuntimeClass name: overhead.podFixed}``.
    """

    def get(self, namespace: str, name: str) -> dict[str, Any] | None: ...


_READ_MEMO_SIZE = 4096


def _bug(step: str, req: AdmissionRequest, error: Exception) -> Decision:
    """Log a bug in admit's own code (traceback, request uid); the allowed, unchanged answer of a mutation it broke."""
    log.error(
        "BUG: %s raised %s on %s %s/%s uid=%s. Input shapes are checked where admit reads them, so an exception from "
        "the decision code on a request is a bug in admit: please report it with the object",
        step, type(error).__name__, req.kind, req.namespace, clip(req.name), clip(req.uid), exc_info=error,
    )
    return Decision(warnings=[f"admit could not compute a mutation ({type(error).__name__}, a bug in admit, logged "
                              "with this request's uid); the object is unchanged"])


class Admission:
    """Answers ``/mutate`` and ``/validate`` requests.

    Args:
        config: settings.
        store: the Kubernetes API (``None``: decide only, create nothing, report the PodGroups that would be made).
        cache: the controller's caches (:class:`GroupCache`; ``None``: none).
    """

    def __init__(self, config: Config, store: Store | None = None, cache: GroupCache | None = None) -> None:
        self.config = config
        self.store = store
        self.cache = cache
        self._missing = getattr(cache, "missing", None)
        self._workload = getattr(cache, "workload", None)
        #: ``{backend: why it cannot create its objects here}``, found at ``admit serve`` start
        #: (``runtime.BackendAPI.start``: the PodGroup CRD not installed); the refusal of such a gang then says it.
        self.problems: dict[str, str] = {}
        #: ``{backend: rediscovery}`` (``runtime.BackendAPI.start``): a write of that backend answered 404 for the
        #: version in use makes it discover again (``await rediscovery.again(config) -> config``), and the request is
        #: decided once more on the settings it gives.
        self.rediscoveries: dict[str, Any] = {}
        # (namespace, name, uid) of a pod a pod joiner read -> its group or None (_read_group; oldest first out)
        self._read_groups: dict[tuple[str, str, str], str | None] = {}

    def mutate(self, req: AdmissionRequest) -> Decision:
        """The ``/mutate`` decision; an internal error gives an allowed, unchanged answer with a warning."""
        try:
            return mutate(req, self.config, self.cache)
        except Exception as e:  # noqa: BLE001 - never fail pod creation on our own bug
            return _bug("mutate", req, e)

    async def finish_mutation(self, req: AdmissionRequest, decision: Decision) -> Decision:
        """Do the read a ``/mutate`` decision waits on (``decision.lookup``); never raises, never refuses.

        A pod joiner's read (``shared.PodRead``: a Spark executor whose driver's group the caches do not know): the
        pod it names is read once (``store.get_pod``, within ``api_timeout_seconds``) and its group remembered by
        uid. A read pod in a group makes the pod join it (the read's ``plan``); one in none leaves it alone; one that
        cannot be read gives the pod the read's warning and no patch.
        """
        look: PodRead | None = decision.lookup
        if look is None or req.object is None:
            return Decision(warnings=decision.warnings)
        try:
            group = await self._read_group(look)
        except KubeError as e:
            return Decision(warnings=[look.unread(e.message)])
        except LookupError as e:
            return Decision(warnings=[look.absent(e.args[0])])
        except Exception as e:  # noqa: BLE001 - never fail pod creation on our own bug
            return _bug("reading the pod a pod joiner asked for", req, e)
        if group is None:
            return Decision()  # the read pod is in no gang: neither is this one
        ops, warnings = plan_patch(req.object, look.plan(group), self.config)
        return Decision(patch=ops, warnings=warnings)

    async def _read_group(self, look: PodRead) -> str | None:
        """The group of the pod ``look`` names (``look.group_of``), read once per ``(namespace, name, uid)``.
        Raises ``KubeError`` (the API failed) or ``LookupError`` (``args[0]``: why the pod cannot be used)."""
        key = (look.namespace, look.name, look.uid)
        if key in self._read_groups:
            return self._read_groups[key]
        get_pod = getattr(self.store, "get_pod", None)
        if get_pod is None:
            raise LookupError("is not known (no Kubernetes API to read it from)")
        pod = await get_pod(look.namespace, look.name, self.config.api_timeout_seconds)
        if pod is None:
            raise LookupError("was not found")
        uid = get_path(pod, ("metadata", "uid"))
        if look.uid and uid and uid != look.uid:
            raise LookupError(f"has another uid ({uid}, not {look.uid}): it was replaced")
        group = look.group_of(pod, self.config)
        if len(self._read_groups) >= _READ_MEMO_SIZE:
            del self._read_groups[next(iter(self._read_groups))]
        self._read_groups[key] = group
        return group

    def verdict_now(self, req: AdmissionRequest) -> tuple[Decision | None, Verdict | None]:
        """The ``/validate`` decision when it needs no API call and nothing to await (most pods), the same as
        :meth:`validate` gives (the server's fast path, ``webhook.fastpath``): ``(decision, None)``; ``(None,
        verdict)`` when it needs them (the pure verdict, for :meth:`validate`'s ``prepared``, so the request is not
        decided twice); ``(None, None)`` on an error (:meth:`validate` decides again and logs it)."""
        try:
            verdict = validate(req, self.config)
            if verdict.ensure is not None or verdict.scale is not None or verdict.read is not None:
                return None, verdict
            if self._missing is not None and req.kind == "Pod" and not req.dry_run \
                    and self._unknown_group(req, verdict.decision) is not None:
                return None, verdict
            return verdict.decision, None
        except Exception:  # noqa: BLE001 - validate() answers and logs it
            return None, None

    async def validate(self, req: AdmissionRequest, _rediscovered: bool = False,
                       prepared: Verdict | None = None) -> Decision:
        """The ``/validate`` decision, with the API work its verdict asks for done (module docstring). ``prepared``:
        the pure verdict :meth:`verdict_now` already gave for this request, so it is not decided twice."""
        verdict: Verdict | None = None
        try:
            verdict = prepared if prepared is not None else validate(req, self.config)
            if verdict.ensure is not None:
                refused = await self._check_autoscalers(verdict.autoscaled, verdict.decision)
                if refused is not None:
                    return refused
                self._counted(verdict)
                await self._ensure(verdict, _generation(req.object),
                                   _resource_version(req.object) if req.operation == "UPDATE" else None)
            elif verdict.scale is not None:
                return await self._check_scale(verdict.scale, verdict.dry_run)
            elif verdict.read is not None:
                return await self._check_read(verdict.read, verdict.decision)
            elif self._missing is not None and req.kind == "Pod" and not req.dry_run:
                unknown = self._unknown_group(req, verdict.decision)  # a dict lookup or two; the rest only on a miss
                if unknown is not None:
                    await self._warn_missing_group(*unknown, verdict.decision)
            return verdict.decision
        except KubeError as e:
            if verdict is not None and verdict.ensure is not None and namespace_terminating(e):
                plan = verdict.ensure
                verdict.decision.pod_groups.clear()
                verdict.decision.warnings.append(
                    f"namespace {plan.namespace} is being deleted: admit created no PodGroup for {plan.ref}")
                return verdict.decision
            if verdict is not None and verdict.ensure is not None and resource_not_served(e):
                # the backend says whether that is for good (its CRD is missing) or its served version may change
                backend = verdict.ensure.backend
                problem = backend_of(backend).not_served_problem(self.config)
                rediscovery = self.rediscoveries.get(backend)
                if problem is None and rediscovery is not None and not _rediscovered:
                    before = self.config
                    self.config = await rediscovery.again(before)
                    if self.config != before:
                        return await self.validate(req, _rediscovered=True)
                if problem is not None:
                    return self._api_failure(self.problems.get(backend) or problem, verdict.decision,
                                             transient=False)
            return self._api_failure(e.message, verdict.decision if verdict is not None else Decision())
        except Exception as e:  # noqa: BLE001 - never a 500
            _bug("validate", req, e)
            return self._internal_error(e, verdict.decision if verdict is not None else Decision())

    def _unknown_group(self, req: AdmissionRequest, decision: Decision) -> tuple[str, str, str] | None:
        """``(backend, namespace, name)`` of the group a Pod CREATE admitted with no gang of its own names with a
        backend's key when the cache lacks it (the ``unknown_group`` hooks, in registry order), else ``None``."""
        if req.operation != "CREATE" or req.group != "" or not decision.allowed:
            return None
        namespace = req.namespace or str(get_path(req.object, ("metadata", "namespace")) or "")
        for backend, unknown_group in named_hooks("unknown_group"):
            name = unknown_group(req.object, namespace, self.config, self.cache)
            if name is not None:
                return backend, namespace, name
        return None

    async def _warn_missing_group(self, backend: str, namespace: str, name: str, decision: Decision) -> None:
        """The warning, if any, of that backend's ``BackendAPI.missing_group`` for a group the cache lacks."""
        api = APIS.get(backend)
        check = api.missing_group if api is not None else None
        warning = await check(namespace, name, self.config, self.cache, self.store) if check is not None else None
        if warning:
            decision.warnings.append(warning)

    def _internal_error(self, error: Exception, decision: Decision) -> Decision:
        """The answer after a bug in admit: the failure mode decides; no "retry" (the object would meet it again)."""
        reason = f"{type(error).__name__} in admit's own code: a bug, logged on the server with this request's uid"
        if self.config.failure_mode == "allow":
            decision.warnings.append(f"report this to admit's maintainers: {reason}; allowed unchecked by failure mode "
                                     "'allow'")
            return decision
        return Decision.deny(f"Report this to admit's maintainers with the object: admit could not check it "
                             f"({reason}); refused by failure mode 'deny'", 500, decision.warnings)

    def _api_failure(self, reason: str, decision: Decision, transient: bool = True) -> Decision:
        """The answer when the API failed: the failure mode decides (``deny``: 503). ``transient`` False: the cause
        does not pass by itself (a CRD not installed), so the answer does not say "retry"."""
        log.warning("failure mode %s: %s", self.config.failure_mode, reason)
        metrics.failure_mode_applied(self.config.failure_mode)
        if self.config.failure_mode == "allow":
            decision.warnings.append(f"allowed unchecked by failure mode 'allow': {str(reason)[:200]}")
            return decision
        fix = "Retry in a moment" if transient else "Install what the gang backend needs (as said next)"
        return Decision.deny(
            f"{fix}: admit could not finish its checks ({reason}); refused by failure mode 'deny' so that pods never "
            + ("wait on a missing PodGroup" if transient else "wait on a PodGroup that cannot be created"),
            503,
            decision.warnings,
        )

    async def _ensure(self, verdict: Verdict, generation: int | None, replaces: str | None) -> None:
        """``backends.ensure.ensure`` over the verdict's plan (it says what ``generation`` and ``replaces`` stamp)."""
        assert verdict.ensure is not None
        await ensure(self.store, verdict.ensure, self.config, verdict.decision, verdict.explicit_name,
                     verdict.dry_run, self.cache, generation, replaces)

    async def _check_scale(self, check: ScaleCheck, dry_run: bool) -> Decision:
        """A ``*/scale`` UPDATE (module docstring). A gang parent the cache holds is judged on the cache's record
        (``claims.resolvable_copy``); a failed live read of one it cannot tell about is allowed with a warning."""
        if self._workload is not None:
            synced, parent = self._workload(check.group, check.version, check.plural, check.kind, check.namespace,
                                            check.name)
            if parent is not None and isinstance(parent.get("spec"), dict):
                return await self._scale_gang(parent, check, dry_run)
            if parent is None and synced:
                return Decision()
        what = f"{check.kind} {check.namespace}/{check.name}"
        if self.store is None:
            return Decision(warnings=[f"{what} not read: scale not checked"])
        try:
            parent = await self.store.get_object(
                check.group, check.version, check.plural, check.namespace, check.name, self.config.api_timeout_seconds
            )
        except KubeError as e:
            if self._known_gang(check):
                raise
            log.info("scale of %s allowed unchecked: %s", what, e.message)
            return Decision(warnings=[f"nothing to change: scale allowed unchecked, admit could not read {str(what)[:80]} "
                                      f"({str(e.message)[:80]}) and does not know it as a gang"])
        if parent is None:
            return Decision(warnings=[parent_not_found(what)])
        return await self._scale_gang(parent, check, dry_run)

    async def _check_autoscalers(self, target: ScaleCheck | None, decision: Decision) -> Decision | None:
        """The refusal of a gang workload a HorizontalPodAutoscaler would scale below its fixed minMember
        (``validate.autoscaler_refusal``, ``Verdict.autoscaled``), from one LIST of its namespace's HPAs; None
        otherwise. A LIST that fails (no RBAC for it, a timeout) gives a warning, no refusal: the HPA's own write is
        still checked."""
        lister = getattr(self.store, "list_objects", None)
        if target is None or lister is None:
            return None
        try:
            hpas = await lister("autoscaling", "v2", "horizontalpodautoscalers", target.namespace,
                                self.config.api_timeout_seconds)
        except KubeError as e:
            decision.warnings.append(
                f"give no HorizontalPodAutoscaler of {target.kind} {target.namespace}/{target.name} a minReplicas "
                f"below {target.replicas}: admit could not list them to check ({str(e.message)[:80]})")
            return None
        refusal = autoscaler_refusal(hpas, target, self.config)
        return None if refusal is None else Decision.deny(refusal, 403, decision.warnings)

    async def _check_read(self, read: Read, decision: Decision) -> Decision:
        """A kind's admission-time read (``WorkloadKind.admission_read``: a TrainJob CREATE reads its
        ClusterTrainingRuntime or TrainingRuntime, one GET) and its judgement (the JobSet Kubeflow Trainer will build
        from it, ``trainer.judge_runtime``): a refusal is the user's object's. A failed read follows the failure mode
        (raises KubeError)."""
        if self.store is None:
            return decision
        obj = await self.store.get_object(read.group, read.version, read.plural, read.namespace, read.name,
                                          self.config.api_timeout_seconds)
        notes: list[str] = []
        warnings, refusal = read.judge(obj, self.config, notes)
        if refusal is not None:
            return Decision.deny(refusal.message, refusal.code, decision.warnings + warnings)
        decision.warnings.extend(warnings)
        if notes and decision.message == "; ".join(decision.notes):  # an allowed answer's message is its notes
            decision.message = "; ".join(decision.notes + notes)
        decision.notes.extend(notes)
        return decision

    def _known_gang(self, check: ScaleCheck) -> bool:
        """The cache holds an object of an enabled backend's gang (``GroupCache.gang_object``, each of the backend's
        ``object_types``) named after the workload and owned by it (``common.owner_annotation``): dict lookups."""
        lookup = getattr(self.cache, "gang_object", None)
        if lookup is None:
            return False
        owner = f"{check.group}/{check.kind}/{check.name}"
        key = ("metadata", "annotations", owner_annotation(self.config))
        return any(get_path(lookup(t.group, t.kind, check.namespace, check.name), key) == owner
                   for name in sorted(self.config.allowed_backends) if (backend := BACKENDS.get(name)) is not None
                   for t in backend.object_types(self.config))

    def _counted(self, verdict: Verdict) -> None:
        """Bring the plan's minResources to what the scheduler counts, from the controller's caches (no API call):
        the pod overhead of a RuntimeClass added, DRA-served resources left out (``validate.add_overhead``,
        ``validate.drop_uncountable``), as the controller's reconcile does (``manager.Manager.countable``)."""
        plan = verdict.ensure
        assert plan is not None
        overheads = getattr(self.cache, "runtime_overheads", None)  # the controller's RuntimeClass cache
        if overheads is not None:
            verdict.decision.warnings.extend(add_overhead(plan, overheads()))
        served = getattr(self.cache, "extended_resources", None)  # the controller's DeviceClass cache
        if served is not None:
            verdict.decision.warnings.extend(drop_uncountable(plan, served()))

    async def _scale_gang(self, parent: dict[str, Any], check: ScaleCheck, dry_run: bool) -> Decision:
        verdict = scale_verdict(parent, check, self.config, dry_run)
        if verdict.ensure is not None:  # auto: the PodGroup takes the new size before the new pods exist
            self._counted(verdict)
            # The new size comes from the scale, which kube-apiserver stores as the next generation of the parent.
            gen = _generation(parent)
            await self._ensure(verdict, gen + 1 if gen is not None else None, _resource_version(parent))
        return verdict.decision


def parent_not_found(what: str) -> str:
    """The warning on a scale (or an HPA) whose workload ``what`` (``"Deployment default/web"``) is not found: it is
    allowed unchecked (``admit review`` puts its own words in its place when that workload is not among the files
    it reviews)."""
    return f"{what} not found: scale not checked against its gang minMember"


def _generation(obj: Any) -> int | None:
    """``metadata.generation`` of an admitted object when it is a positive int (absent on a mutating CREATE)."""
    gen = get_path(obj, ("metadata", "generation"))
    return gen if isinstance(gen, int) and not isinstance(gen, bool) and gen > 0 else None


def _resource_version(obj: Any) -> str | None:
    """``metadata.resourceVersion`` of an admitted object (on an UPDATE: the stored version it replaces), or ``None``."""
    rv = get_path(obj, ("metadata", "resourceVersion"))
    return rv if isinstance(rv, str) and rv else None
