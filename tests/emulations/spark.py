"""The spark-operator (kubeflow/spark-operator v2, read at ``38082f3``, 2026-08-21, tags up to v2.5.2) and the
spark-submit it runs, as the fake API runs them: the batch-scheduler step, the driver Pod spark-submit creates, the
operator's own pod mutating webhook, and the executor Pods the driver creates, each Pod created through the fake's
admission chain.

From the spark-operator's code:

- **Flags** (``cmd/operator/controller/start.go``): ``--enable-batch-scheduler`` registers Volcano, YuniKorn and every
  ``--kube-scheduler-names`` entry (scheduler-plugins' Coscheduling runs as such a kube-scheduler); without it no
  batch scheduler exists. ``--default-batch-scheduler`` must be one of them (the operator exits otherwise).
- **Which apps are ganged** (``internal/controller/sparkapplication/controller.go`` ``shouldDoBatchScheduling``):
  ``spec.batchScheduler`` if set, else ``--default-batch-scheduler``; none -> no batch scheduling. It runs in
  ``submitSparkApplication`` before spark-submit, on an in-memory copy of the app (only ``status`` is written back,
  ``updateSparkApplicationStatus``: ``r.client.Status().Update``), so what it adds reaches the pods only through the
  spark-submit arguments:

  - a kube-scheduler name (``internal/scheduler/kubescheduler/scheduler.go`` ``Schedule``, ``util.go``
    ``getPodGroupName``): PodGroup ``<app>-pg`` (minMember 1, minResources = driver + initial executors, a
    controller ownerReference to the app) and the app label ``scheduling.x-k8s.io/pod-group: <app>-pg``;
  - ``volcano`` (``internal/scheduler/volcano/scheduler.go`` ``syncPodGroupInClusterMode``, ``util.go``): Volcano
    PodGroup ``spark-<app>-pg`` (made here only when the fake serves ``scheduling.volcano.sh/v1beta1``) and the
    driver and executor annotation ``scheduling.k8s.io/group-name: spark-<app>-pg``;
  - ``yunikorn`` (``internal/scheduler/yunikorn/scheduler.go`` ``Schedule``, ``addTaskGroupAnnotations``): driver and
    executor ``schedulerName: yunikorn`` (in memory only, and spark-submit is never given a scheduler name), the
    annotation ``yunikorn.apache.org/task-group-name`` (``spark-driver`` / ``spark-executor``) and on the driver
    ``yunikorn.apache.org/task-groups``.
- **spark-submit's arguments** (``submission.go`` ``driverConfOption`` / ``executorConfOption``): pod labels
  ``sparkoperator.k8s.io/app-name``, ``launched-by-spark-operator``, ``submission-id`` (and ``mutated-by-spark-operator``
  without a pod template), then the app's ``metadata.labels`` (except ``kueue.x-k8s.io/``), then
  ``spec.<role>.labels``, each as ``--conf spark.kubernetes.<role>.label.<key>=<value>``; ``spec.<role>.annotations``
  likewise. The driver Pod's name is ``util.GetDriverPodName``: ``spec.driver.podName``, else
  ``sparkConf["spark.kubernetes.driver.pod.name"]``, else ``<app>-driver``.
- **The operator's pod webhook** (``internal/webhook/sparkpod_defaulter.go`` ``SparkPodDefaulter.Default``,
  ``mutateSparkPod``): for a Pod labelled ``sparkoperator.k8s.io/app-name`` it reads the stored app and, among
  others, ``addOwnerReference`` (the driver gets a controller ownerReference to the app) and ``addSchedulerName``
  (``spec.batchScheduler`` if set, else ``spec.driver.schedulerName`` / ``spec.executor.schedulerName``; unset
  leaves the pod's). :func:`spark_pod_defaulter` does these two; volumes, env, affinity, tolerations, GPUs, ports
  and the rest of ``mutateSparkPod`` are not emulated (admit reads none of them).

From Spark (``resource-managers/kubernetes``; not in the sources read, so **unconfirmed** against Spark's code, as
Spark's "Running on Kubernetes" page describes them):

- a repeated ``--conf`` key keeps its last value (``SparkSubmitArguments`` keeps the properties in a map), so
  ``spec.driver.labels`` win over the app's labels;
- the driver Pod gets ``spark-app-selector: spark-<32 hex>``, ``spark-role: driver`` and ``spark-version``; it has
  no ownerReference of Spark's; it is created by spark-submit inside the operator's pod (the operator's
  ServiceAccount);
- the executors ``<app>-<16 hex>-exec-<n>`` (n from 1; the initial number, ``GetInitialExecutorNumber``) carry the
  executor labels, ``spark-app-selector``, ``spark-role: executor``, ``spark-exec-id``, and a controller
  ownerReference to the driver Pod, and are created by the driver (its ServiceAccount, ``spec.driver.serviceAccount``
  or ``default``). Here they are made as soon as the driver Pod is stored (no kubelet: the driver never runs).

:func:`install` registers the operator's pod webhook in the fake's admission chain as its chart does
(``charts/spark-operator-chart/templates/webhook/mutatingwebhookconfiguration.yaml``: configuration
``spark-operator-webhook``, webhook ``mutate--v1-pod.sparkoperator.k8s.io``, Pods on CREATE, objectSelector
``sparkoperator.k8s.io/launched-by-spark-operator: "true"``, ``failurePolicy: Fail`` from the chart's values, no
reinvocation): kube-apiserver calls it after admit's (configurations in name order), and admit's, with
``reinvocationPolicy: IfNeeded``, again when it changed the Pod. Its SparkApplication defaulter and validator
(``sparkapplication_defaulter.go``, ``sparkapplication_validator.go``: name, Spark version, node selectors, ingress
options, sparkConf) check nothing admit writes and are not emulated. Not emulated: most status transitions, the retry interval, the web UI,
Prometheus, dynamic allocation after start, client mode, ``ScheduledSparkApplication``, the validating webhooks.
Status: only ``SUBMITTED`` after submission, and the re-run of a submitted application whose spec changes
(:meth:`SparkOperator.observe`). **Later writes** (:data:`LATER`, for tests/operators/test_later_writes.py): the
``RUNNING`` status, a retry after the driver fails (``FAILING`` -> ``PENDING_RERUN`` -> submitted again), a lost
executor replaced by the driver, the user's spec change (a re-run), a GitOps re-apply.
"""

from __future__ import annotations

import copy
import re
import secrets
import uuid
from typing import TYPE_CHECKING, Any

from .kit import OperatorEmulation, controller_ref, service_account
from .gitops import reapply_write
from .later import Emulated, LaterWrite

if TYPE_CHECKING:
    from admit.testing.fake_kube import AdmissionChain, FakeKubeAPI

__all__ = ["SparkOperator", "install", "POD_WEBHOOK_SPEC", "driver_pod", "executor_pods", "spark_pod_defaulter", "batch_schedule",
           "initial_executors"]

JSON = dict[str, Any]
API = "sparkoperator.k8s.io/v1beta2"
APP_NAME = "sparkoperator.k8s.io/app-name"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_GROUP = "scheduling.k8s.io/group-name"
YUNIKORN_TASK_GROUP = "yunikorn.apache.org/task-group-name"
YUNIKORN_TASK_GROUPS = "yunikorn.apache.org/task-groups"


def initial_executors(app: JSON) -> int:
    """``util.GetInitialExecutorNumber``: ``spec.executor.instances`` (defaulted to 1 by ``setExecutorSpecDefaults``),
    or with dynamic allocation the largest of instances, initialExecutors and minExecutors."""
    spec = app.get("spec") or {}
    instances = (spec.get("executor") or {}).get("instances")
    dyn = spec.get("dynamicAllocation") or {}
    if dyn.get("enabled"):
        return max(instances or 0, dyn.get("initialExecutors") or 0, dyn.get("minExecutors") or 0)
    return 1 if instances is None else instances


def batch_schedule(api: "FakeKubeAPI", app: JSON, scheduler: str, kube_schedulers: tuple[str, ...]) -> JSON:
    """The chosen plugin's ``Schedule(app)``: writes its gang object and returns the in-memory app it changed
    (module docstring)."""
    app = copy.deepcopy(app)
    meta, spec = app["metadata"], app.setdefault("spec", {})
    ns, name = meta.get("namespace"), meta["name"]
    driver, executor = spec.setdefault("driver", {}), spec.setdefault("executor", {})
    if scheduler in kube_schedulers:
        pg_name = f"{name}-pg"
        if api.get("scheduling.x-k8s.io/v1alpha1", "podgroups", ns, pg_name) is None:
            api.put({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                     "metadata": {"name": pg_name, "namespace": ns, "ownerReferences": [controller_ref(app)]},
                     "spec": {"minMember": 1}})
        meta.setdefault("labels", {})[POD_GROUP_LABEL] = pg_name
    elif scheduler == "volcano":
        pg_name = f"spark-{name}-pg"
        if VOLCANO_GROUP not in (driver.get("annotations") or {}):
            try:
                api.resource_type("scheduling.volcano.sh/v1beta1", "podgroups")
                if api.get("scheduling.volcano.sh/v1beta1", "podgroups", ns, pg_name) is None:
                    api.put({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                             "metadata": {"name": pg_name, "namespace": ns, "ownerReferences": [controller_ref(app)]},
                             "spec": {"minMember": 1}})
            except KeyError:
                pass
            driver.setdefault("annotations", {})[VOLCANO_GROUP] = pg_name
            executor.setdefault("annotations", {})[VOLCANO_GROUP] = pg_name
    elif scheduler == "yunikorn":
        driver["schedulerName"] = executor["schedulerName"] = "yunikorn"
        driver.setdefault("annotations", {})[YUNIKORN_TASK_GROUP] = "spark-driver"
        executor.setdefault("annotations", {})[YUNIKORN_TASK_GROUP] = "spark-executor"
        driver["annotations"][YUNIKORN_TASK_GROUPS] = '[{"name":"spark-driver","minMember":1}]'
    return app


def _conf_labels(app: JSON, role: str, submission_id: str) -> dict[str, str]:
    """The ``spark.kubernetes.<role>.label.*`` confs in argument order, a later key winning (module docstring)."""
    spec = app.get("spec") or {}
    labels = {APP_NAME: app["metadata"]["name"], "sparkoperator.k8s.io/launched-by-spark-operator": "true"}
    if not (spec.get(role) or {}).get("template"):
        labels["sparkoperator.k8s.io/mutated-by-spark-operator"] = "true"
    labels["sparkoperator.k8s.io/submission-id"] = submission_id
    for key, value in (app["metadata"].get("labels") or {}).items():
        if not key.startswith("kueue.x-k8s.io/"):
            labels[key] = value
    labels.update((spec.get(role) or {}).get("labels") or {})
    return labels


def _memory_mib(value: Any, default: str = "1g") -> int:
    m = re.fullmatch(r"(\d+)([kmgt]?)b?", str(value or default).lower())
    if not m:
        return 1024
    n, unit = int(m.group(1)), m.group(2) or "m"
    return {"k": n // 1024, "m": n, "g": n * 1024, "t": n * 1024 * 1024}[unit]


def _container(app: JSON, role: str) -> JSON:
    spec = app.get("spec") or {}
    part = spec.get(role) or {}
    memory = _memory_mib(part.get("memory"))
    factor = 0.4 if spec.get("type") in ("Python", "R") else 0.1
    overhead = _memory_mib(part["memoryOverhead"]) if part.get("memoryOverhead") else max(int(memory * factor), 384)
    cpu = part.get("coreRequest") or str(part.get("cores") or 1)
    return {"name": f"spark-kubernetes-{role}", "image": part.get("image") or spec.get("image") or "spark:3.5.0",
            "resources": {"requests": {"cpu": cpu, "memory": f"{memory + overhead}Mi"},
                          "limits": {"memory": f"{memory + overhead}Mi"}}}


def driver_pod(app: JSON, submission_id: str, app_id: str) -> JSON:
    """The driver Pod spark-submit creates for the (in-memory) ``app``."""
    spec = app.get("spec") or {}
    driver = spec.get("driver") or {}
    name = driver.get("podName") or (spec.get("sparkConf") or {}).get("spark.kubernetes.driver.pod.name") or \
        f"{app['metadata']['name']}-driver"
    labels = {**_conf_labels(app, "driver", submission_id), "spark-app-selector": app_id, "spark-role": "driver",
              "spark-version": str(spec.get("sparkVersion") or "3.5.0")}
    pod: JSON = {"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": name, "namespace": app["metadata"].get("namespace"), "labels": labels},
                 "spec": {"restartPolicy": "Never", "containers": [_container(app, "driver")]}}
    if driver.get("annotations"):
        pod["metadata"]["annotations"] = dict(driver["annotations"])
    if driver.get("serviceAccount"):
        pod["spec"]["serviceAccountName"] = driver["serviceAccount"]
    return pod


def executor_pods(app: JSON, driver: JSON, submission_id: str) -> list[JSON]:
    """The executor Pods the running driver creates at start (module docstring; Spark's side unconfirmed)."""
    spec = app.get("spec") or {}
    executor = spec.get("executor") or {}
    prefix = f"{app['metadata']['name']}-{secrets.token_hex(8)}"
    app_id = driver["metadata"]["labels"]["spark-app-selector"]
    pods = []
    for n in range(1, initial_executors(app) + 1):
        labels = {**_conf_labels(app, "executor", submission_id), "spark-app-selector": app_id,
                  "spark-role": "executor", "spark-exec-id": str(n), "spark-exec-resourceprofile-id": "0"}
        pod: JSON = {"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": f"{prefix}-exec-{n}", "namespace": app["metadata"].get("namespace"),
                                  "labels": labels, "ownerReferences": [controller_ref(driver)]},
                     "spec": {"restartPolicy": "Never", "containers": [_container(app, "executor")]}}
        if executor.get("annotations"):
            pod["metadata"]["annotations"] = dict(executor["annotations"])
        pods.append(pod)
    return pods


def spark_pod_defaulter(pod: JSON, stored_app: JSON | None) -> JSON:
    """The spark-operator's pod webhook (``SparkPodDefaulter.Default``): ``addOwnerReference`` and
    ``addSchedulerName`` from the **stored** app. Returns a new Pod; a Pod without the app-name label, or whose app
    is not stored, is returned as is (the real webhook errors for the latter)."""
    if stored_app is None or APP_NAME not in (pod["metadata"].get("labels") or {}):
        return pod
    pod = copy.deepcopy(pod)
    spec = stored_app.get("spec") or {}
    role = pod["metadata"]["labels"].get("spark-role")
    if role == "driver":
        ref = controller_ref(stored_app)
        refs = pod["metadata"].setdefault("ownerReferences", [])
        if ref not in refs:
            refs.append(ref)
    name = spec.get("batchScheduler") if spec.get("batchScheduler") is not None else \
        (spec.get(role) or {}).get("schedulerName") if role in ("driver", "executor") else None
    if name:
        pod["spec"]["schedulerName"] = name
    return pod


class SparkOperator(OperatorEmulation):
    """The emulated spark-operator (and spark-submit, and the Spark driver) of one :class:`FakeKubeAPI`.

    Args:
        api: the fake.
        enable_batch_scheduler: ``--enable-batch-scheduler``.
        default_batch_scheduler: ``--default-batch-scheduler`` (``""``: unset).
        kube_scheduler_names: ``--kube-scheduler-names``.

    Raises:
        ValueError: a default batch scheduler that is not registered (the operator exits: "Failed to find default
            batch scheduler in registered schedulers").

        in_chain: its pod webhook is in the fake's admission chain (:func:`install`); else :meth:`pod_webhook` is
            applied to each Pod before its create (a fake without admission).

    Attributes:
        submitted: in-memory apps as the batch scheduler left them, by ``(namespace, name)``.
        reruns: ``(namespace, name)`` of every application re-run because its spec changed after submission
            (:meth:`observe`), oldest first.
    """

    component = "spark-operator-controller"

    def __init__(self, api: "FakeKubeAPI", *, enable_batch_scheduler: bool = False, default_batch_scheduler: str = "",
                 kube_scheduler_names: tuple[str, ...] = (), in_chain: bool = False) -> None:
        super().__init__(api, service_account("spark-operator", "spark-operator-controller"))
        registered = ("volcano", "yunikorn", *kube_scheduler_names) if enable_batch_scheduler else ()
        if enable_batch_scheduler and default_batch_scheduler and default_batch_scheduler not in registered:
            raise ValueError("Failed to find default batch scheduler in registered schedulers")
        self.registered = registered
        self.enable_batch_scheduler = enable_batch_scheduler
        self.default_batch_scheduler = default_batch_scheduler
        self.kube_scheduler_names = tuple(kube_scheduler_names)
        self.submitted: dict[tuple[str, str], JSON] = {}
        self.reruns: list[tuple[str, str]] = []
        self._invalidated: set[tuple[str, str]] = set()
        self.in_chain = in_chain
        self.watch(API, "sparkapplications", self._sync)

    def observe(self, rt: Any, ns: str, name: str, obj: JSON | None, old: JSON | None = None) -> None:
        """``EventFilter.Update`` (``internal/controller/sparkapplication/event_filter.go``, v2.5.2): a submitted
        application whose spec changed, ``suspend`` and ``timeToLiveSeconds`` aside, is invalidated (state
        ``INVALIDATING``) and re-run: :meth:`_sync` deletes its driver and executors
        (``reconcileInvalidatingSparkApplication``, ``deleteSparkResources``) and submits it again
        (``reconcilePendingRerunSparkApplication``). The ``PartialRestart`` gate (alpha, off) is not emulated."""
        if (rt.key == ("sparkoperator.k8s.io", "v1beta2", "sparkapplications") and obj is not None and old is not None
                and (ns, name) in self.submitted and _spec_changed(old, obj)):
            self._invalidated.add((ns, name))
        super().observe(rt, ns, name, obj, old)

    def _invalidate(self, ns: str, name: str, app: JSON) -> None:
        """Delete the run's driver and executors and forget the submission (the re-run's first half)."""
        self._invalidated.discard((ns, name))
        self.submitted.pop((ns, name), None)
        self.reruns.append((ns, name))
        self.event(app, "Normal", "SparkApplicationSpecUpdateProcessed",
                   f"SparkApplication {name} was updated, re-running it")
        for pod in self.api.objects("pods", ns):
            if (pod["metadata"].get("labels") or {}).get(APP_NAME) == name:
                self.api.delete_object("v1", "pods", ns, pod["metadata"]["name"])

    def _mark_submitted(self, ns: str, name: str, submission_id: str, driver: JSON) -> None:
        """``submitSparkApplication`` then ``updateSparkApplicationStatus``: state ``SUBMITTED`` (a status write)."""
        stored = self.api.get(API, "sparkapplications", ns, name)
        if stored is None:
            return
        stored["status"] = {"applicationState": {"state": "SUBMITTED"}, "submissionID": submission_id,
                            "driverInfo": {"podName": driver["metadata"]["name"]}}
        self.api.put(stored)

    def pod_webhook(self, pod: JSON, namespace: str | None = None) -> JSON:
        """The operator's pod webhook on ``pod``: :func:`spark_pod_defaulter` with the stored app."""
        app_name = (pod["metadata"].get("labels") or {}).get(APP_NAME)
        ns = namespace or pod["metadata"].get("namespace")
        stored = self.api.get(API, "sparkapplications", ns, app_name) if app_name else None
        return spark_pod_defaulter(pod, stored)

    def _before_create(self, pod: JSON) -> JSON:
        return pod if self.in_chain else self.pod_webhook(pod)

    def scheduler_for(self, app: JSON) -> str | None:
        """``shouldDoBatchScheduling``: the batch scheduler that gangs ``app``, or None."""
        if not self.enable_batch_scheduler:
            return None
        name = (app.get("spec") or {}).get("batchScheduler") or self.default_batch_scheduler
        return name if name in self.registered else None

    async def _sync(self, ns: str, name: str) -> None:
        app = self.live(API, "sparkapplications", ns, name)
        if app is not None and (ns, name) in self._invalidated:
            self._invalidate(ns, name, app)
        if app is None or (ns, name) in self.submitted:
            return
        submission_id = str(uuid.uuid4())
        scheduler = self.scheduler_for(app)
        if scheduler is not None:
            app = batch_schedule(self.api, app, scheduler, self.kube_scheduler_names)
        self.submitted[(ns, name)] = app
        driver = await self.create(app, "v1", "pods",
                                   self._before_create(driver_pod(app, submission_id, f"spark-{uuid.uuid4().hex}")),
                                   "SparkApplicationSubmissionFailed")
        if driver is None:
            return
        self._mark_submitted(ns, name, submission_id, driver)
        driver_sa = service_account(ns, str(((app.get("spec") or {}).get("driver") or {}).get("serviceAccount")
                                            or "default"))
        for pod in executor_pods(app, driver, submission_id):
            await self.create(driver, "v1", "pods", self._before_create(pod), "ExecutorPodCreationFailed",
                              user=driver_sa)


def _spec_changed(old: JSON, new: JSON) -> bool:
    """``EventFilter.Update``'s test: the specs differ once ``suspend`` and ``timeToLiveSeconds`` are set aside."""
    def cut(spec: Any) -> JSON:
        return {k: v for k, v in (spec or {}).items() if k not in ("suspend", "timeToLiveSeconds")}
    return cut(old.get("spec")) != cut(new.get("spec"))


#: The operator chart's pod webhook (``mutatingwebhookconfiguration.yaml``, values ``webhook.failurePolicy: Fail``;
#: ``spark.jobNamespaces`` left at its default, every namespace).
POD_WEBHOOK_CONFIGURATION = "spark-operator-webhook"
POD_WEBHOOK_SPEC: JSON = {
    "name": "mutate--v1-pod.sparkoperator.k8s.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
    "failurePolicy": "Fail", "timeoutSeconds": 10,
    "clientConfig": {"service": {"name": "spark-operator-webhook-svc", "namespace": "spark-operator",
                                 "port": 9443, "path": "/mutate--v1-pod"}},
    "objectSelector": {"matchLabels": {"sparkoperator.k8s.io/launched-by-spark-operator": "true"}},
    "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}],
}


def install(api: "FakeKubeAPI", chain: "AdmissionChain | None" = None, **flags: Any) -> SparkOperator:
    """Run the spark-operator on ``api`` (``flags`` as :class:`SparkOperator`) and register its pod webhook in
    ``chain`` (None: applied before each Pod's create instead)."""
    from admit.testing.fake_kube import patched

    op = SparkOperator(api, in_chain=chain is not None, **flags)
    if chain is not None:
        async def pod_webhook(request: JSON) -> JSON:
            return patched(request, op.pod_webhook(request["object"], request.get("namespace")))

        chain.add("Mutating", POD_WEBHOOK_CONFIGURATION, copy.deepcopy(POD_WEBHOOK_SPEC), pod_webhook)
    return api.add_controller(op)


# ----------------------------------------------------------------------------------------------------------------------
# Later writes (tests/emulations/later.py): what the spark-operator, the driver, a user and a GitOps tool send after
# the CREATE
# ----------------------------------------------------------------------------------------------------------------------

USER_WRITER = {"username": "alice", "groups": ["system:authenticated"]}


def _install_later(api: "FakeKubeAPI", chain: "AdmissionChain | None" = None) -> SparkOperator:
    """The spark-operator with its pod webhook in the chain, as its chart installs it (no batch scheduler)."""
    return install(api, chain)


def _note(op: SparkOperator, obj: JSON, problem: str | None) -> None:
    if problem is not None:
        op.errors.append((obj["metadata"]["namespace"], obj["metadata"]["name"], problem))


async def _settle(op: SparkOperator) -> None:
    await op.api.settle()
    await op.idle()


def _set_state(op: SparkOperator, ns: str, name: str, state: str) -> None:
    """``updateSparkApplicationStatus``: ``r.client.Status().Update`` (the status subresource: no webhook of the
    chart's sees it)."""
    api = op.api
    app = api.get(API, "sparkapplications", ns, name)
    if app is None:
        return
    new = copy.deepcopy(app)
    new.setdefault("status", {}).setdefault("applicationState", {})["state"] = state
    api._update(api.resource_type(API, "sparkapplications"), ns, name, app, new,  # noqa: SLF001
                subresource="status", dry_run=False, require_rv=False)


def _pods(op: SparkOperator, ns: str, name: str, role: str) -> list[JSON]:
    return sorted((p for p in op.api.objects("pods", ns)
                   if (p["metadata"].get("labels") or {}).get(APP_NAME) == name
                   and (p["metadata"].get("labels") or {}).get("spark-role") == role
                   and not p["metadata"].get("deletionTimestamp")), key=lambda p: p["metadata"]["name"])


async def running(op: SparkOperator, obj: JSON) -> None:
    """The driver runs: ``reconcileSubmittedSparkApplication`` -> ``updateDriverState`` sets ``RUNNING`` (a status
    write)."""
    ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    if _pods(op, ns, name, "driver"):
        _set_state(op, ns, name, "RUNNING")
    await _settle(op)


async def retry_after_the_driver_fails(op: SparkOperator, obj: JSON) -> None:
    """The driver fails (its pod ``Failed``, as the kubelet reports it) and the application is retried
    (``restartPolicy`` ``OnFailure``/``Always`` with retries left, ``util.ShouldRetry``): ``updateDriverState`` ->
    ``FAILING``; ``reconcileFailingSparkApplication`` deletes the driver and executors (``deleteSparkResources``)
    and sets ``PENDING_RERUN``; ``reconcilePendingRerunSparkApplication`` submits it again: a new driver pod of the
    same name, new executors."""
    api, ns, name = op.api, obj["metadata"]["namespace"], obj["metadata"]["name"]
    drivers = _pods(op, ns, name, "driver")
    if not drivers:
        return
    driver = drivers[0]
    api.put({**driver, "apiVersion": "v1", "kind": "Pod", "status": {**(driver.get("status") or {}), "phase": "Failed"}})
    _set_state(op, ns, name, "FAILING")
    for pod in api.objects("pods", ns):  # deleteSparkResources: the driver pod (its executors go with it)
        if (pod["metadata"].get("labels") or {}).get(APP_NAME) == name:
            api.delete_object("v1", "pods", ns, pod["metadata"]["name"])
    _set_state(op, ns, name, "PENDING_RERUN")
    op.submitted.pop((ns, name), None)  # the status write above wakes the sync, which submits it again
    await _settle(op)


async def an_executor_is_lost(op: SparkOperator, obj: JSON) -> None:
    """An executor pod is lost (its node gone: the pod deleted) and the driver asks for a replacement (Spark's
    ``ExecutorPodsAllocator``: a new pod ``<prefix>-exec-<next id>``, from the executor template, as the driver's
    ServiceAccount; unconfirmed against Spark's code, module docstring)."""
    api, ns, name = op.api, obj["metadata"]["namespace"], obj["metadata"]["name"]
    executors = _pods(op, ns, name, "executor")
    drivers = _pods(op, ns, name, "driver")
    if not executors or not drivers:
        return
    lost = executors[0]
    api.delete_object("v1", "pods", ns, lost["metadata"]["name"])
    replacement = copy.deepcopy(lost)
    ids = [int((p["metadata"].get("labels") or {}).get("spark-exec-id", "0")) for p in executors]
    next_id = str(max(ids) + 1)
    prefix = lost["metadata"]["name"].rsplit("-exec-", 1)[0]
    replacement["metadata"] = {k: v for k, v in replacement["metadata"].items()
                               if k in ("namespace", "labels", "annotations", "ownerReferences")}
    replacement["metadata"]["name"] = f"{prefix}-exec-{next_id}"
    replacement["metadata"]["labels"]["spark-exec-id"] = next_id
    replacement.pop("status", None)
    driver = api.get("v1", "pods", ns, drivers[0]["metadata"]["name"]) or drivers[0]
    app = api.get(API, "sparkapplications", ns, name) or obj
    driver_sa = service_account(ns, str(((app.get("spec") or {}).get("driver") or {}).get("serviceAccount")
                                        or "default"))
    await op.create({**driver, "apiVersion": "v1", "kind": "Pod"}, "v1", "pods", op._before_create(replacement),
                    "ExecutorPodCreationFailed", user=driver_sa)
    await _settle(op)


async def gitops_reapply(op: SparkOperator, obj: JSON) -> None:
    """A GitOps tool re-applies the user's manifest (``tests.emulations.gitops``): no spec change, so no re-run."""
    from . import gitops

    runs = len(op.reruns)
    _note(op, obj, await gitops.reapply(op.api, obj, "sparkapplications"))
    await _settle(op)
    if len(op.reruns) != runs:
        _note(op, obj, "the GitOps re-apply re-ran the application")


async def user_changes_the_spec(op: SparkOperator, obj: JSON) -> None:
    """The user changes the application's spec (a new image): the operator re-runs it (``EventFilter.Update`` ->
    ``INVALIDATING`` -> ``PENDING_RERUN``), and the re-run is ganged like the first."""
    api, ns, name = op.api, obj["metadata"]["namespace"], obj["metadata"]["name"]
    stored = api.get(API, "sparkapplications", ns, name)
    if stored is None:
        return
    stored["spec"]["image"] = f"{stored['spec'].get('image', 'spark:3.5.5')}-next"
    try:
        await api.admitted_update(api.resource_type(API, "sparkapplications"), ns, name, stored, dry_run=False,
                                  user=USER_WRITER)
    except Exception as e:  # noqa: BLE001 - an ApiError: the user's own write refused is a problem here
        _note(op, obj, f"the user's spec change refused: {e}")
    await _settle(op)


def gangs_of(op: SparkOperator, obj: JSON) -> list[tuple[str, list[JSON]]]:
    """The application's live driver and executor pods (not finished), one gang; none without pods."""
    ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    pods = [p for p in _pods(op, ns, name, "driver") + _pods(op, ns, name, "executor")
            if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    return [(f"SparkApplication {name}", pods)] if pods else []


def refused_writes(op: SparkOperator) -> list[tuple[str, str, str]]:
    """The operator's and the driver's refused creates, and the later writes' problems."""
    return list(op.errors)


def _retries(obj: JSON) -> bool:
    policy = (obj.get("spec") or {}).get("restartPolicy") or {}
    return policy.get("type") == "Always" or (policy.get("type") == "OnFailure"
                                              and int(policy.get("onFailureRetries") or 0) > 0)


_CONTROLLER = "kubeflow/spark-operator internal/controller/sparkapplication/controller.go"
LATER_WRITES = (
    reapply_write(gitops_reapply, "; " + _CONTROLLER.split(" ")[0]
                  + " internal/controller/sparkapplication/event_filter.go EventFilter.Update (v2.5.2)"),
    LaterWrite("the driver runs (status RUNNING)", f"{_CONTROLLER} reconcileSubmittedSparkApplication, "
               "updateDriverState, updateSparkApplicationStatus (v2.5.2)", "always", lambda obj: True, running),
    LaterWrite("an executor lost and replaced by the driver", "apache/spark resource-managers/kubernetes "
               "ExecutorPodsAllocator (unconfirmed: not in the sources read)",
               "always (static allocation keeps spec.executor.instances)", lambda obj: True, an_executor_is_lost),
    LaterWrite("retry after the driver fails", f"{_CONTROLLER} updateDriverState, "
               "reconcileFailingSparkApplication, deleteSparkResources, reconcilePendingRerunSparkApplication, "
               "submitSparkApplication; pkg/util/sparkapplication.go ShouldRetry (v2.5.2)",
               "spec.restartPolicy.type OnFailure (onFailureRetries > 0) or Always", _retries,
               retry_after_the_driver_fails),
    LaterWrite("the user changes the spec (re-run)", f"{_CONTROLLER.rsplit('/', 1)[0]}/event_filter.go "
               "EventFilter.Update; controller.go reconcileInvalidatingSparkApplication (v2.5.2)",
               "any spec change but suspend and timeToLiveSeconds", lambda obj: True, user_changes_the_spec),
)

LATER = Emulated("spark", _install_later, ((API, "SparkApplication"),), LATER_WRITES, gangs_of, refused_writes)
