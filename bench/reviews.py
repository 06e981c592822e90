"""AdmissionReview bodies for the benchmark, shaped as kube-apiserver sends them (admission.k8s.io/v1).

Each mix is a list of request *templates*: ``(path, parts)`` where ``parts`` is the compact JSON body split at the
places that change per request (``request.uid``, and the Deployment name in the Deployment mix). Filling a
template is a bytes join, so the load generator spends its CPU on the wire, not on building JSON.

Mixes (one *admission* = the requests kube-apiserver sends for one object):

- ``known-group``: a Pod CREATE from a ReplicaSet whose Deployment admit mutated (pod-group label, schedulerName
  already set), with managedFields, env, volumes (about 5 KB); sent to ``/mutate`` then ``/validate``, as both
  webhooks match pods. Expected answer: allowed, no patch, no Kubernetes API call.
- ``no-group``: the same Pod without the label, scheduled by default-scheduler; ``/mutate`` then ``/validate``.
- ``deployment``: a gang Deployment CREATE (kubectl apply: last-applied-configuration, managedFields) to
  ``/mutate``, then the mutated Deployment to ``/validate``, which creates its PodGroup. Every admission uses a new
  Deployment name, so each costs exactly one PodGroup POST (no 409 + GET).
- ``scale``: a ``deployments/scale`` UPDATE (kubectl scale 8 -> 6 of a gang Deployment with min-member 4) to
  ``/validate``; admit reads the parent Deployment: one GET per admission.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

NAMESPACE = "bench"
SCHEDULER = "scheduler-plugins-scheduler"
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
UID_MARK = "@@UID@@"
NAME_MARK = "@@NAME@@"

__all__ = ["Mix", "MIXES", "deployment", "mutated", "scale_parent", "uid_for", "NAMESPACE"]


def uid_for(n: int) -> bytes:
    """A UUID-shaped request uid (36 characters), unique per request number ``n``."""
    return b"00000000-0000-4000-8000-%012x" % n


@dataclass(frozen=True)
class Mix:
    """One traffic mix.

    Attributes:
        name: short name used on the command line and in the table.
        title: what it is, for the table.
        steps: ``(path, parts)`` per request of one admission; ``parts`` alternate literal bytes and markers
            (``UID_MARK``/``NAME_MARK``).
        expect: bytes every answer must contain (``"allowed":true``).
    """

    name: str
    title: str
    steps: tuple[tuple[str, tuple[bytes | str, ...]], ...]
    expect: bytes = b'"allowed":true'

    def body_sizes(self) -> list[int]:
        """Body size of each step in bytes (with a filled uid and name)."""
        return [len(fill(parts, 0)) for _, parts in self.steps]


def fill(parts: tuple[bytes | str, ...], n: int) -> bytes:
    """The body of request number ``n`` from a template's parts."""
    out = []
    for p in parts:
        if p == UID_MARK:
            out.append(uid_for(n))
        elif p == NAME_MARK:
            out.append(b"gang-%08d" % n)
        else:
            out.append(p)  # type: ignore[arg-type]
    return b"".join(out)


def _split(doc: dict[str, Any]) -> tuple[bytes | str, ...]:
    text = json.dumps(doc, separators=(",", ":"))
    parts: list[bytes | str] = []
    rest = text
    while True:
        cuts = [(rest.find(m), m) for m in (UID_MARK, NAME_MARK) if rest.find(m) >= 0]
        if not cuts:
            parts.append(rest.encode())
            return tuple(parts)
        i, mark = min(cuts)
        parts.append(rest[:i].encode())
        parts.append(mark)
        rest = rest[i + len(mark):]


def _review(obj: dict[str, Any], *, operation: str, kind: tuple[str, str, str], resource: tuple[str, str, str],
            user: dict[str, Any], name: str | None = None, old: dict[str, Any] | None = None,
            sub_resource: str | None = None) -> dict[str, Any]:
    req: dict[str, Any] = {
        "uid": UID_MARK,
        "kind": dict(zip(("group", "version", "kind"), kind)),
        "resource": dict(zip(("group", "version", "resource"), resource)),
        "requestKind": dict(zip(("group", "version", "kind"), kind)),
        "requestResource": dict(zip(("group", "version", "resource"), resource)),
        "namespace": NAMESPACE,
        "operation": operation,
        "userInfo": user,
        "object": obj,
        "oldObject": old,
        "dryRun": False,
        "options": {"kind": f"{operation.title()}Options", "apiVersion": "meta.k8s.io/v1",
                    **({"fieldManager": "kubectl-client-side-apply", "fieldValidation": "Strict"}
                       if operation == "CREATE" and kind[2] != "Pod" else {})},
    }
    if name:
        req["name"] = name
    if sub_resource:
        req["subResource"] = sub_resource
        req["requestSubResource"] = sub_resource
    return {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": req}


RS_CONTROLLER = {
    "username": "system:serviceaccount:kube-system:replicaset-controller",
    "uid": "5a1b9c1e-8f2d-4c3b-9d0e-1f2a3b4c5d6e",
    "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"],
}
ADMIN = {"username": "kubernetes-admin", "groups": ["kubeadm:cluster-admins", "system:authenticated"]}


def _container(name: str, image: str) -> dict[str, Any]:
    return {
        "name": name,
        "image": image,
        "args": ["--port=8080", "--metrics-port=9090", "--log-format=json"],
        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"},
                  {"name": "metrics", "containerPort": 9090, "protocol": "TCP"}],
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE",
             "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}},
            {"name": "WORLD_SIZE", "value": "8"},
            {"name": "MASTER_ADDR", "value": "trainer-0.trainer.bench.svc.cluster.local"},
        ],
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "1Gi"}},
        "volumeMounts": [{"name": "config", "mountPath": "/etc/trainer", "readOnly": True}],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }


def _pod(app: str, group: str | None) -> dict[str, Any]:
    labels = {"app": app, "pod-template-hash": "7d9f8b6c5d"}
    if group:
        labels[GROUP_LABEL] = group
    token_volume = {
        "name": "kube-api-access-x7k2p",
        "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                                                                            "fieldPath": "metadata.namespace"}}]}},
        ]},
    }
    container = _container("trainer", "registry.example.com/ml/trainer:2.4.1")
    container["volumeMounts"].append({"name": "kube-api-access-x7k2p", "readOnly": True,
                                      "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"})
    rs = f"{app}-7d9f8b6c5d"
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "generateName": f"{rs}-",
            "creationTimestamp": None,
            "labels": labels,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs,
                                 "uid": "0b6f3c1e-4a7d-4f7e-9c57-2f0a9d7b1c11", "controller": True,
                                 "blockOwnerDeletion": True}],
            "managedFields": [{
                "manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                "time": "2026-11-29T10:12:03Z", "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {
                        "f:generateName": {},
                        "f:labels": {".": {}, **{f"f:{k}": {} for k in labels}},
                        "f:ownerReferences": {".": {}, 'k:{"uid":"0b6f3c1e-4a7d-4f7e-9c57-2f0a9d7b1c11"}': {}},
                    },
                    "f:spec": {
                        "f:containers": {'k:{"name":"trainer"}': {
                            ".": {}, "f:args": {}, "f:env": {".": {}, 'k:{"name":"POD_NAME"}': {}},
                            "f:image": {}, "f:imagePullPolicy": {}, "f:name": {}, "f:ports": {},
                            "f:resources": {}, "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {},
                            "f:volumeMounts": {}}},
                        "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:restartPolicy": {},
                        "f:schedulerName": {}, "f:securityContext": {}, "f:terminationGracePeriodSeconds": {},
                        "f:volumes": {".": {}, 'k:{"name":"config"}': {}},
                    },
                },
            }],
        },
        "spec": {
            "volumes": [{"name": "config", "configMap": {"name": f"{app}-config", "defaultMode": 420}}, token_volume],
            "containers": [container, _container("log-agent", "registry.example.com/obs/log-agent:1.9.0")],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "securityContext": {},
            "schedulerName": SCHEDULER if group else "default-scheduler",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300},
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {},
    }


def deployment(name: str, min_member: str, replicas: int) -> dict[str, Any]:
    template_labels = {"app": "trainer"}
    annotations = {"gang.admit.dev/min-member": min_member, "gang.admit.dev/schedule-timeout-seconds": "60"}
    applied = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"annotations": dict(annotations), "name": name, "namespace": NAMESPACE},
        "spec": {"replicas": replicas, "selector": {"matchLabels": template_labels},
                 "template": {"metadata": {"labels": template_labels},
                              "spec": {"containers": [{"name": "trainer",
                                                       "image": "registry.example.com/ml/trainer:2.4.1"}]}}},
    }
    container = _container("trainer", "registry.example.com/ml/trainer:2.4.1")
    return {
        "kind": "Deployment",
        "apiVersion": "apps/v1",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "creationTimestamp": None,
            "annotations": {**annotations,
                            "kubectl.kubernetes.io/last-applied-configuration": json.dumps(applied) + "\n"},
            "managedFields": [{
                "manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "apps/v1",
                "time": "2026-11-29T10:12:01Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, **{f"f:{k}": {} for k in annotations},
                                                              "f:kubectl.kubernetes.io/last-applied-configuration": {}}},
                             "f:spec": {"f:replicas": {}, "f:selector": {}, "f:template": {
                                 "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                                 "f:spec": {"f:containers": {'k:{"name":"trainer"}': {
                                     ".": {}, "f:args": {}, "f:env": {}, "f:image": {}, "f:name": {},
                                     "f:ports": {}, "f:resources": {}}}, "f:volumes": {}}}}},
            }],
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": template_labels},
            "template": {
                "metadata": {"creationTimestamp": None, "labels": dict(template_labels)},
                "spec": {
                    "volumes": [{"name": "config", "configMap": {"name": "trainer-config", "defaultMode": 420}}],
                    "containers": [container, _container("log-agent", "registry.example.com/obs/log-agent:1.9.0")],
                    "restartPolicy": "Always",
                    "terminationGracePeriodSeconds": 30,
                    "dnsPolicy": "ClusterFirst",
                    "securityContext": {},
                    "schedulerName": "default-scheduler",
                },
            },
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
        },
        "status": {},
    }


def mutated(dep: dict[str, Any], group: str) -> dict[str, Any]:
    out = copy.deepcopy(dep)
    out["metadata"].setdefault("labels", {})["gang.admit.dev/managed"] = "true"
    out["spec"]["template"]["metadata"]["labels"][GROUP_LABEL] = group
    out["spec"]["template"]["spec"]["schedulerName"] = SCHEDULER
    return out


SCALE_PARENT = "web"


def scale_parent() -> dict[str, Any]:
    """The gang Deployment (8 replicas, min-member 4) the ``scale`` mix scales; stored in the fake API first."""
    dep = mutated(deployment(SCALE_PARENT, "4", 8), SCALE_PARENT)
    dep["metadata"].pop("managedFields")
    dep["metadata"].pop("creationTimestamp")
    dep.pop("status")
    return dep


def _scale(replicas: int, rv: str) -> dict[str, Any]:
    return {"kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {"name": SCALE_PARENT, "namespace": NAMESPACE, "uid": "9d2c4f7a-1b3e-4c5d-8e9f-0a1b2c3d4e5f",
                         "resourceVersion": rv, "creationTimestamp": "2026-11-29T09:58:41Z"},
            "spec": {"replicas": replicas}, "status": {"replicas": 8, "selector": "app=trainer"}}


def _build() -> dict[str, Mix]:
    pod_kind = ("", "v1", "Pod")
    pod_res = ("", "v1", "pods")
    known = _review(_pod("trainer", "trainer"), operation="CREATE", kind=pod_kind, resource=pod_res,
                    user=RS_CONTROLLER)
    plain = _review(_pod("web", None), operation="CREATE", kind=pod_kind, resource=pod_res, user=RS_CONTROLLER)
    dep = deployment(NAME_MARK, "auto", 4)
    dep_kind = ("apps", "v1", "Deployment")
    dep_res = ("apps", "v1", "deployments")
    dep_create = _review(dep, operation="CREATE", kind=dep_kind, resource=dep_res, user=ADMIN, name=NAME_MARK)
    dep_validate = _review(mutated(dep, NAME_MARK), operation="CREATE", kind=dep_kind, resource=dep_res,
                           user=ADMIN, name=NAME_MARK)
    scale = _review(_scale(6, "48211"), operation="UPDATE", kind=("autoscaling", "v1", "Scale"), resource=dep_res,
                    user=ADMIN, name=SCALE_PARENT, old=_scale(8, "48195"), sub_resource="scale")
    mixes = [
        Mix("known-group", "Pod CREATE of a known gang group (/mutate + /validate)",
            (("/mutate", _split(known)), ("/validate", _split(known)))),
        Mix("no-group", "Pod CREATE outside any group (/mutate + /validate)",
            (("/mutate", _split(plain)), ("/validate", _split(plain)))),
        Mix("deployment", "gang Deployment CREATE, new PodGroup each (/mutate + /validate)",
            (("/mutate", _split(dep_create)), ("/validate", _split(dep_validate)))),
        Mix("scale", "deployments/scale UPDATE 8 -> 6, min-member 4 (/validate)",
            (("/validate", _split(scale)),)),
    ]
    return {m.name: m for m in mixes}


MIXES: dict[str, Mix] = _build()
"""The mixes by name, in table order."""
