"""What the operator emulations of this package share (``kuberay``, ``spark``, ``kubeflow``): one work queue per
watched kind, writes through the fake's admission chain under the operator's ServiceAccount, Warning Events on
refusals, and a way for tests to wait until the operator is done.

An emulation is a :class:`Controller` (a work queue; the fake takes any ``fake_kube.Controller``) registered with
``FakeKubeAPI.add_controller`` (each module's ``install``); the fake calls its ``observe`` after every committed
write, and it reconciles the kinds it watches (an informer's event handler). Nothing here talks HTTP: the emulation
runs in the fake's process and calls ``admitted_create``, the path a client's write takes (mutating webhooks,
defaults, validating webhooks, store).
"""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from admit.testing.fake_kube import ApiError

if TYPE_CHECKING:
    from admit.testing.fake_kube import FakeKubeAPI, ResourceType

__all__ = ["Controller", "OperatorEmulation", "Sync", "service_account", "random_suffix", "controller_ref", "owned_by",
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


class Controller:
    """One sync task per object key, as a controller's work queue: a write during a sync makes it run once more.

    Subclasses define ``_sync(namespace, name)`` and either ``watches`` (the ``(group, version, plural)`` whose
    writes sync the written object's key) or :meth:`observe` (to map a write of another kind onto the key of the
    object it belongs to, as a controller's ``Watches(..., EnqueueRequestForOwner)``). Register with
    :meth:`FakeKubeAPI.add_controller`: it is a ``fake_kube.Controller``, the protocol the fake calls."""

    what = "controller"
    #: ``source.component`` of the Warning Events it records (``events.EventRecorder``'s component).
    component = "controller"
    watches: tuple[tuple[str, str, str], ...] = ()

    def __init__(self, api: "FakeKubeAPI") -> None:
        self.api = api
        self.errors: list[tuple[str, str, str]] = []
        self._running: dict[tuple[str, str], asyncio.Task] = {}
        self._dirty: set[tuple[str, str]] = set()

    #: A Pod this kind controls syncs its owner when it is deleted, or also updated with ``pod_updates``.
    pod_owner: str | None = None
    pod_updates = False

    def observe(self, rt: "ResourceType", ns: str, name: str, obj: JSON | None, old: JSON | None = None) -> None:
        """A write was committed (``obj``: the new object, None when deleted; ``old``: the previous one, None when
        created): sync ``(ns, name)`` when ``rt`` is watched, or a Pod's :attr:`pod_owner`."""
        if rt.key == ("", "v1", "pods") and old is not None and (obj is None or self.pod_updates):
            for ref in old["metadata"].get("ownerReferences") or []:
                if ref.get("controller") and ref.get("kind") == self.pod_owner:
                    self.changed(ns, ref["name"])
        elif obj is not None and rt.key in self.watches:
            self.changed(ns, name)

    def changed(self, ns: str, name: str) -> None:
        """An object was written: sync it (at most one sync per object at a time; a write during a sync makes it
        run once more)."""
        key = (ns, name)
        if key in self._running:
            self._dirty.add(key)
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._running[key] = loop.create_task(self._run(key))

    @property
    def busy(self) -> bool:
        """A sync is running or queued."""
        return bool(self._running)

    async def idle(self, timeout: float = 10.0) -> None:
        """Wait until no sync is running (tests)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self._running:
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"the fake {self.what} is still syncing")
            await asyncio.sleep(0.005)

    def stop(self) -> None:
        for task in self._running.values():
            task.cancel()
        self._running.clear()

    async def _run(self, key: tuple[str, str]) -> None:
        try:
            while True:
                self._dirty.discard(key)
                await self._sync(*key)
                if key not in self._dirty:
                    return
        finally:
            self._running.pop(key, None)

    async def _sync(self, ns: str, name: str) -> None:
        raise NotImplementedError

    def _refused(self, owner: JSON, reason: str, message: str) -> None:
        """A write refused while syncing ``owner`` (a stored object): kept in :attr:`errors` as ``(namespace, name,
        message)`` and recorded as a Warning Event ``reason`` on ``owner``, as the controller's recorder does."""
        meta = owner["metadata"]
        ns, name = meta.get("namespace", ""), meta["name"]
        self.errors.append((ns, name, message))
        self.api.put({"apiVersion": "v1", "kind": "Event", "metadata": {"generateName": f"{name}.", "namespace": ns},
                      "involvedObject": {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": name,
                                         "namespace": ns, "uid": meta["uid"]},
                      "reason": reason, "message": message, "type": "Warning",
                      "source": {"component": self.component}})

    def _live(self, api_version: str, plural: str, ns: str, name: str) -> JSON | None:
        """The stored object, or None when it is absent or being deleted (a controller leaves it alone then)."""
        obj = self.api._bucket(self.api.resource_type(api_version, plural)).get((ns, name))  # noqa: SLF001
        return None if obj is None or obj["metadata"].get("deletionTimestamp") else obj

    def _owned(self, api_version: str, plural: str, ns: str, uid: str) -> list[JSON]:
        """The objects of ``plural`` in ``ns`` whose controller ownerReference names ``uid``."""
        bucket = self.api._bucket(self.api.resource_type(api_version, plural))  # noqa: SLF001
        return [obj for (ons, _), obj in bucket.items()
                if ons == ns and any(r.get("controller") and r.get("uid") == uid
                                     for r in obj["metadata"].get("ownerReferences") or [])]


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
                if other is not self and isinstance(other, Controller):
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
