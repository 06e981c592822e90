"""What the operator emulations of this package share (``kuberay``, ``spark``, ``kubeflow``): one work queue per
watched kind, writes through the fake's admission chain under the operator's ServiceAccount, Warning Events on
refusals, and a way for tests to wait until the operator is done.

An emulation is a ``fake_kube.Controller`` registered with ``FakeKubeAPI.add_controller`` (each module's
``install``); the fake calls its ``observe`` after every committed write, and it reconciles the kinds it watches
(an informer's event handler). Nothing here talks HTTP: the emulation runs in the fake's process and calls
``admitted_create``, the path a client's write takes (mutating webhooks, defaults, validating webhooks, store).
"""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from admit.testing.fake_kube import ApiError, Controller

if TYPE_CHECKING:
    from admit.testing.fake_kube import FakeKubeAPI, ResourceType

__all__ = ["OperatorEmulation", "Sync", "service_account", "random_suffix", "controller_ref", "owned_by",
           "clear_start_time"]

JSON = dict[str, Any]
Key = tuple[str, str, str]
Sync = Callable[[str, str], Awaitable[None]]
"""A reconcile of one object: ``await sync(namespace, name)`` (what :meth:`OperatorEmulation.watch` runs)."""

_RAND = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery/pkg/util/rand alphanums (rand.String)


def random_suffix(n: int = 5) -> str:
    """``rand.String(n)`` of k8s.io/apimachinery/pkg/util/rand (its alphabet, no vowels)."""
    return "".join(random.choice(_RAND) for _ in range(n))


def service_account(namespace: str, name: str) -> JSON:
    """The AdmissionReview ``userInfo`` of a controller running as ServiceAccount ``namespace/name``."""
    return {"username": f"system:serviceaccount:{namespace}:{name}",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"]}


def controller_ref(owner: JSON, *, block: bool = True) -> JSON:
    """``metav1.NewControllerRef(owner, gvk)`` / ``ctrl.SetControllerReference``: ``controller: true`` and
    ``blockOwnerDeletion: true``. The group, version and kind are ``owner``'s own fields, so ``owner`` must be an
    object as a GET or a write answers it (or a custom resource as listed): a built-in kind's list items carry no
    ``apiVersion``/``kind`` (the operators take them from their scheme; LWS's ``_owner`` does so)."""
    meta = owner["metadata"]
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": block}


def clear_start_time(api: "FakeKubeAPI", job: JSON) -> JSON:
    """A status Update of batch/v1 Job ``job`` (as stored) clearing ``status.startTime``, which the operators that
    change a suspended Job's pod template write first: kube-apiserver lets the template's labels, annotations and
    scheduling directives change only while the Job is suspended and has never started (kubernetes
    ``pkg/registry/batch/job/strategy.go`` ``validationOptionsForJob``), and the Job controller sets ``startTime``
    when it first runs it and never clears it (``syncJob``). Kueue v0.19.2 ``Job.Stop`` (``PatchStatus``), JobSet
    v0.12.0 ``resumeJob`` and mpi-operator v0.8.2 ``syncHandler`` (``UpdateStatus``) do it. Status writes go to no
    webhook of admit's chart. Returns the Job as stored (``job`` itself without a ``startTime``)."""
    if not (job.get("status") or {}).get("startTime"):
        return job
    new = {**job, "status": {k: v for k, v in job["status"].items() if k != "startTime"}}
    meta = job["metadata"]
    return api._update(api.resource_type("batch/v1", "jobs"), meta.get("namespace"), meta["name"], job,  # noqa: SLF001
                       new, subresource="status", dry_run=False, require_rv=False)


def owned_by(obj: JSON, uid: str) -> bool:
    """True when ``obj``'s controller ownerReference names ``uid``."""
    return any(r.get("controller") and r.get("uid") == uid for r in obj["metadata"].get("ownerReferences") or [])


def _busy(controller: Controller) -> bool:
    """A sync of ``controller`` is running or queued."""
    return bool(controller._running)  # noqa: SLF001


class _KindLoop(Controller):
    def __init__(self, api: "FakeKubeAPI", what: str, sync: Sync) -> None:
        super().__init__(api)
        self.what = what
        self._sync_fn = sync

    async def _sync(self, ns: str, name: str) -> None:
        await self._sync_fn(ns, name)


class OperatorEmulation(Controller):
    """Base of an operator emulation: subclasses call :meth:`watch` for each kind they reconcile.

    Attributes:
        api: the :class:`FakeKubeAPI` it writes to.
        user: ``userInfo`` its writes carry (its ServiceAccount).
        errors: ``(namespace, object, message)`` of every refused write, oldest first.
        watches: the ``(group, version, plural)`` keys it is told about.
    """

    component = "operator"

    def __init__(self, api: "FakeKubeAPI", user: JSON) -> None:
        super().__init__(api)
        self.what = self.component
        self.user = user
        self._loops: dict[Key, _KindLoop] = {}

    def observe(self, rt: "ResourceType", ns: str, name: str, obj: JSON | None, old: JSON | None = None) -> None:
        """A committed write: reconcile ``(ns, name)`` in the loop of ``rt``'s kind, when it is watched."""
        loop = self._loops.get(rt.key)
        if obj is not None and loop is not None:
            loop.changed(ns, name)

    @property
    def busy(self) -> bool:
        """A sync of one of its kinds is running or queued."""
        return any(_busy(loop) for loop in self._loops.values())

    def watch(self, api_version: str, plural: str, sync: Sync) -> None:
        """Reconcile ``sync(namespace, name)`` on every write of ``api_version`` ``plural`` (one sync at a time per
        object; a write during a sync makes it run once more)."""
        rt = self.api.resource_type(api_version, plural)
        self._loops[rt.key] = _KindLoop(self.api, f"{self.component} ({plural})", sync)
        self.watches = tuple(self._loops)

    def stop(self) -> None:
        for loop in self._loops.values():
            loop.stop()

    async def idle(self, timeout: float = 10.0) -> None:
        """Wait until none of its syncs runs, nor any other controller of the fake (the Job controller making the
        launcher's pod, another operator's kind loops) (tests)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            loops: list[Controller] = [*self._loops.values()]
            for other in self.api.controllers:  # another emulation's own loops: its idle would wait for this one
                if other is not self:
                    loops += list(other._loops.values()) if isinstance(other, OperatorEmulation) else [other]
            for loop in loops:
                await loop.idle(max(0.1, deadline - asyncio.get_running_loop().time()))
            await asyncio.sleep(0.01)
            if not any(_busy(loop) for loop in loops):
                return
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"the fake {self.component} is still syncing")

    def live(self, api_version: str, plural: str, ns: str, name: str) -> JSON | None:
        """The stored object, or None when absent or being deleted."""
        obj = self.api.get(api_version, plural, ns, name)
        return None if obj is None or obj["metadata"].get("deletionTimestamp") else obj

    def owned(self, api_version: str, plural: str, ns: str, uid: str) -> list[JSON]:
        """Live objects of ``plural`` in ``ns`` controlled by ``uid``, oldest first, as listed (an informer's view: a
        built-in kind's carry no ``apiVersion``/``kind``)."""
        found = [o for o in self.api.list_objects(api_version, plural, ns)
                 if owned_by(o, uid) and not o["metadata"].get("deletionTimestamp")]
        return sorted(found, key=lambda o: int(o["metadata"].get("resourceVersion") or 0))

    async def create(self, owner: JSON, api_version: str, plural: str, body: JSON, reason: str, *,
                     user: JSON | None = None) -> JSON | None:
        """Create ``body`` through admission as this operator (or ``user``); a refusal is recorded in :attr:`errors` and as a
        Warning Event ``reason`` on ``owner`` (the operator's recorder), and returns None."""
        rt = self.api.resource_type(api_version, plural)
        ns = body["metadata"].get("namespace") or owner["metadata"].get("namespace") or ""
        try:
            return await self.api.admitted_create(rt, ns, body, dry_run=False, user=user or self.user)
        except ApiError as e:
            name = body["metadata"].get("name") or body["metadata"].get("generateName", "")
            message = f"{reason}: {plural} {ns}/{name}: {e.message}"
            self.errors.append((ns, owner["metadata"]["name"], message))
            self.event(owner, "Warning", reason, message)
            return None

    def event(self, regarding: JSON, type_: str, reason: str, message: str) -> None:
        """A core/v1 Event about ``regarding`` from this operator (:func:`put_event`)."""
        put_event(self.api, regarding, type_, reason, message, self.component)


def put_event(api: "FakeKubeAPI", regarding: JSON, type_: str, reason: str, message: str, component: str) -> None:
    """Store a core/v1 Event about ``regarding`` (a stored object: its apiVersion, kind, name, namespace and uid
    become ``involvedObject``) from ``component``, as an operator's EventRecorder writes it (client-go
    tools/record ``recorder.generateEvent``: ``generateName`` ``<name>.``, ``source.component``)."""
    meta = regarding["metadata"]
    api.put({"apiVersion": "v1", "kind": "Event",
             "metadata": {"generateName": f"{meta['name']}.", "namespace": meta.get("namespace")},
             "involvedObject": {"apiVersion": regarding["apiVersion"], "kind": regarding["kind"],
                                "name": meta["name"], "namespace": meta.get("namespace"), "uid": meta.get("uid")},
             "reason": reason, "message": message, "type": type_, "source": {"component": component}})
