"""A GitOps tool re-applying the manifest a user created a workload from (Argo CD with ``ServerSideApply=true``,
Flux's kustomize-controller, ``kubectl apply --server-side``), emulated from kube-apiserver's server-side apply
(kubernetes ``staging/src/k8s.io/apiserver/pkg/endpoints/handlers/fieldmanager``, ``structured-merge-diff``
``merge.Updater.Apply``), for the later writes of tests/emulations/later.py.

The fake API serves no server-side apply, so the re-apply is sent as the UPDATE that apply amounts to. kube-apiserver
records the applier's fields **before** admission (``handlers/create.go`` and ``patch.go``:
``scope.FieldManager.UpdateNoErrors`` / ``fieldManager.Apply``, then ``mutatingAdmission.Admit``; the wrapper
``fieldmanager.NewManagedFieldsValidatingAdmissionController`` only checks that a webhook left ``managedFields``
valid), so the fields a mutating webhook set (admit's labels, ``schedulerName``, annotations, a ``runtimePatches``
entry; an operator's defaults) belong to no manager, and a re-apply of the same manifest neither owns nor removes
them: it sets every field the manifest names (:func:`applied`) and goes through admission again. The invariant: the
stored object is then what it was (no change, so no new revision, no restart: nothing lost, no fight), and nothing
is refused. List items are matched by position (the manifest's, as written).
"""

from __future__ import annotations

import copy
from typing import Any

from .kit import service_account
from .later import LaterWrite
from admit.testing.fake_kube import ApiError, FakeKubeAPI

__all__ = ["USER", "applied", "reapply"]

JSON = dict[str, Any]
USER = service_account("argocd", "argocd-application-controller")
_OWNED = (("spec",), ("metadata", "labels"), ("metadata", "annotations"))


def _leaves(obj: Any, path: tuple = ()) -> dict[tuple, Any]:
    if isinstance(obj, dict):
        out: dict[tuple, Any] = {}
        for k, v in obj.items():
            out.update(_leaves(v, path + (k,)))
        return out
    if isinstance(obj, list):
        out = {}
        for i, v in enumerate(obj):
            out.update(_leaves(v, path + (i,)))
        return out
    return {path: obj}


def _owned(obj: JSON) -> dict[tuple, Any]:
    return {p: v for p, v in _leaves(obj).items() if p[:1] == ("spec",) or p[:2] in _OWNED[1:]}


def _get(obj: Any, path: tuple) -> Any:
    for key in path:
        if isinstance(obj, dict) and key in obj or isinstance(obj, list) and isinstance(key, int) and key < len(obj):
            obj = obj[key]
        else:
            return None
    return obj


def _set(obj: JSON, path: tuple, value: Any) -> None:
    node: Any = obj
    for key, following in zip(path[:-1], path[1:]):
        if isinstance(node, list):
            while len(node) <= key:
                node.append([] if isinstance(following, int) else {})
            node = node[key]
        else:
            node = node.setdefault(key, [] if isinstance(following, int) else {})
    if isinstance(node, list):
        while len(node) <= path[-1]:
            node.append(None)
    node[path[-1]] = copy.deepcopy(value)


def applied(stored: JSON, manifest: JSON) -> JSON:
    """The object server-side apply makes of ``manifest`` re-applied onto ``stored`` by the manager that created
    it from the same manifest (module docstring), before admission: ``stored`` with every field of the manifest's
    ``spec``, labels and annotations set."""
    new = copy.deepcopy(stored)
    for path, value in _owned(manifest).items():
        _set(new, path, value)
    return new


async def reapply(api: FakeKubeAPI, manifest: JSON, plural: str) -> str | None:
    """Re-apply ``manifest`` (the user's, as created) as the GitOps tool; what went wrong (a refusal, or the stored
    object changed: a field lost or a fight), or None."""
    meta = manifest["metadata"]
    api_version, ns, name = manifest["apiVersion"], meta.get("namespace"), meta["name"]
    stored = api.get(api_version, plural, ns, name)
    if stored is None or stored["metadata"].get("deletionTimestamp"):
        return None
    try:
        await api.admitted_update(api.resource_type(api_version, plural), ns, name,
                                  applied(stored, manifest), dry_run=False, user=USER)
    except ApiError as e:
        return f"the GitOps re-apply of {manifest['kind']} {ns}/{name} refused: {e.message}"
    after = api.get(api_version, plural, ns, name) or {}
    changed = {p: (v, _get(after, p)) for p, v in _owned(stored).items() if _get(after, p) != v}
    changed.update({p: (None, v) for p, v in _owned(after).items() if p not in _owned(stored)})
    if changed:
        return f"the GitOps re-apply of {manifest['kind']} {ns}/{name} changed it: {dict(list(changed.items())[:4])}"
    return None


def reapply_write(send: Any, also: str = "") -> LaterWrite:
    """The GitOps re-apply of the same manifest as a later write of an emulation's registry, sent by ``send``
    (``await send(operator, user_object)``, the emulation's own re-apply of its kind): one record, its source and
    what turns it on, for every emulation that has one; ``also``: the operator's own source it follows besides."""
    return LaterWrite("GitOps re-apply of the same manifest",
                      "kubernetes staging/src/k8s.io/apiserver/pkg/endpoints/handlers create.go / patch.go (the "
                      "field manager records the applier's fields before mutating admission)" + also,
                      "Argo CD ServerSideApply=true, Flux kustomize-controller, kubectl apply --server-side",
                      lambda obj: True, send)
