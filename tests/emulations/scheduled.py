"""Two controllers that make a gang kind's object from a template on a schedule, as the fake API runs them, each run
created through the fake's admission chain under the operator's ServiceAccount:

- the spark-operator's ScheduledSparkApplication controller (kubeflow/spark-operator v2.5.2,
  ``internal/controller/scheduledsparkapplication/controller.go``): ``Reconcile`` in state ``Scheduled`` once the next
  run is due: ``shouldStartNextRun`` by ``spec.concurrencyPolicy`` (``Allow``, the CRD's default: always; ``Forbid``:
  only when the last run is ``COMPLETED`` or ``FAILED``, ``hasLastRunFinished``; ``Replace``: the last run deleted
  first when it is not finished, ``killLastRunIfNotFinished``), then ``createSparkApplication``: name
  ``<name>-<time>`` (``formatTimestamp``, the default precision ``nanos`` of the flag
  ``--scheduled-spark-application-timestamp-precision``), the ScheduledSparkApplication's labels plus
  ``sparkoperator.k8s.io/scheduled-app-name``, **no annotations**, one ownerReference with ``BlockOwnerDeletion`` and
  no ``Controller``, ``spec`` = ``spec.template``; then the status (``lastRun``, ``lastRunName``, ``nextRun``,
  ``scheduleState: Scheduled``). Its runs are listed by the label (``listSparkApplications``). A suspended one
  (``spec.suspend``) makes none.
- KubeRay's RayCronJob controller (ray-project/kuberay v1.7.0, ``ray-operator/controllers/ray/raycronjob_controller.go``,
  feature gate ``RayCronJob``, alpha, off by default: ``main.go`` starts the controller only with it): ``Reconcile``
  once ``schedule.Next(lastScheduleTime or creationTimestamp)`` is not after now, ``constructRayJob``: name
  ``<name>-<scheduled time in minutes>`` (``getRayJobName``), the label ``ray.io/cronjob-name``, the annotation
  ``ray.io/cronjob-scheduled-timestamp`` (RFC 3339, UTC) and no other, a controller ownerReference
  (``ctrl.SetControllerReference``), ``spec`` = ``spec.jobTemplate``; an AlreadyExists answer is success (the
  deterministic name); then ``status.lastScheduleTime``. A suspended one makes none; it has no concurrency policy.

The schedule itself is not parsed: a test says when a run is due (:meth:`ScheduledSpark.run_due`,
:meth:`RayCronJobs.run_due`) with the time the controller would use. The runs' own operators are the other
emulations (``tests/emulations/spark.py``, ``kuberay.py``), installed beside these. Not emulated: history limits
(``checkAndUpdatePastRuns``), time zones, validation events.
"""

from __future__ import annotations

import copy
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from . import gitops, kuberay, spark
from .gitops import reapply_write
from .kit import OperatorEmulation, controller_ref, service_account
from .later import Emulated, LaterWrite
from admit.testing.fake_kube import ApiError

if TYPE_CHECKING:
    from admit.testing.fake_kube import FakeKubeAPI

__all__ = ["ScheduledSpark", "RayCronJobs", "install_scheduled_spark", "install_ray_cron_jobs", "spark_run",
           "ray_job_run", "SCHEDULED_APP_LABEL", "RAY_CRONJOB_LABEL"]

JSON = dict[str, Any]
SPARK_API = "sparkoperator.k8s.io/v1beta2"
RAY_API = "ray.io/v1"
SCHEDULED_APP_LABEL = "sparkoperator.k8s.io/scheduled-app-name"
RAY_CRONJOB_LABEL = "ray.io/cronjob-name"
RAY_CRONJOB_TIMESTAMP = "ray.io/cronjob-scheduled-timestamp"


def spark_run(sched: JSON, when: datetime) -> JSON:
    """``createSparkApplication`` for ScheduledSparkApplication ``sched`` (stored, with uid) at ``when``."""
    meta = sched["metadata"]
    labels = {SCHEDULED_APP_LABEL: meta["name"], **(meta.get("labels") or {})}
    return {"apiVersion": SPARK_API, "kind": "SparkApplication",
            "metadata": {"name": f"{meta['name']}-{int(when.timestamp() * 1_000_000) * 1000}",
                         "namespace": meta.get("namespace"), "labels": labels,
                         "ownerReferences": [{"apiVersion": SPARK_API, "kind": "ScheduledSparkApplication",
                                              "name": meta["name"], "uid": meta["uid"],
                                              "blockOwnerDeletion": True}]},
            "spec": copy.deepcopy((sched.get("spec") or {}).get("template") or {})}


def ray_job_run(cron: JSON, when: datetime) -> JSON:
    """``constructRayJob`` for RayCronJob ``cron`` (stored, with uid) for the scheduled time ``when``."""
    meta = cron["metadata"]
    return {"apiVersion": RAY_API, "kind": "RayJob",
            "metadata": {"name": f"{meta['name']}-{int(when.timestamp()) // 60}", "namespace": meta.get("namespace"),
                         "labels": {RAY_CRONJOB_LABEL: meta["name"]},
                         "annotations": {RAY_CRONJOB_TIMESTAMP: when.astimezone(timezone.utc).strftime(
                             "%Y-%m-%dT%H:%M:%SZ")},
                         "ownerReferences": [controller_ref(cron)]},
            "spec": copy.deepcopy((cron.get("spec") or {}).get("jobTemplate") or {})}


def _finished(app: JSON) -> bool:
    """``hasLastRunFinished``."""
    return ((app.get("status") or {}).get("applicationState") or {}).get("state") in ("COMPLETED", "FAILED")


class ScheduledSpark(OperatorEmulation):
    """The ScheduledSparkApplication controller of one :class:`FakeKubeAPI` (module docstring)."""

    component = "scheduledsparkapplication-controller"

    def __init__(self, api: "FakeKubeAPI") -> None:
        super().__init__(api, service_account("spark-operator", "spark-operator-controller"))

    async def idle(self, timeout: float = 10.0) -> None:
        """Nothing of it runs in the background (each run is made in ``run_due``, which its caller awaits), so
        another emulation's ``idle`` that waits for every controller of the fake need not wait for it."""

    def runs(self, ns: str, name: str) -> list[JSON]:
        """``listSparkApplications``: the runs by label, newest first (``sortSparkApplicationsInPlace``)."""
        found = [a for a in self.api.list_objects(SPARK_API, "sparkapplications", ns)
                 if (a["metadata"].get("labels") or {}).get(SCHEDULED_APP_LABEL) == name]
        return sorted(found, key=lambda a: str(a["metadata"].get("creationTimestamp") or ""), reverse=True)

    async def run_due(self, ns: str, name: str, when: datetime) -> JSON | None:
        """The run due at ``when``: the SparkApplication made (as stored), or None (suspended, held back by the
        concurrency policy, or refused: :attr:`errors`)."""
        sched = self.live(SPARK_API, "scheduledsparkapplications", ns, name)
        if sched is None or (sched.get("spec") or {}).get("suspend") is True:
            return None
        runs = self.runs(ns, name)
        policy = (sched.get("spec") or {}).get("concurrencyPolicy") or "Allow"
        if runs and policy == "Forbid" and not _finished(runs[0]):
            return None
        if runs and policy == "Replace" and not _finished(runs[0]):
            self.api.delete_object(SPARK_API, "sparkapplications", ns, runs[0]["metadata"]["name"])
        app = await self.create(sched, SPARK_API, "sparkapplications", spark_run(sched, when),
                                "ScheduledSparkApplicationRunFailed")
        if app is not None:
            stored = self.api.get(SPARK_API, "scheduledsparkapplications", ns, name)
            if stored is not None:
                stored["status"] = {**(stored.get("status") or {}), "lastRunName": app["metadata"]["name"],
                                    "lastRun": when.strftime("%Y-%m-%dT%H:%M:%SZ"), "scheduleState": "Scheduled"}
                self.api.put(stored)
        return app


class RayCronJobs(OperatorEmulation):
    """KubeRay's RayCronJob controller of one :class:`FakeKubeAPI` (module docstring)."""

    component = "raycronjob-controller"

    def __init__(self, api: "FakeKubeAPI") -> None:
        super().__init__(api, service_account("ray-system", "kuberay-operator"))

    async def idle(self, timeout: float = 10.0) -> None:
        """Nothing of it runs in the background (each run is made in ``run_due``, which its caller awaits), so
        another emulation's ``idle`` that waits for every controller of the fake need not wait for it."""

    async def run_due(self, ns: str, name: str, when: datetime) -> JSON | None:
        """The RayJob for the scheduled time ``when`` (as stored; the stored one when it exists already), or None
        (suspended, or refused: :attr:`errors`)."""
        cron = self.live(RAY_API, "raycronjobs", ns, name)
        if cron is None or (cron.get("spec") or {}).get("suspend") is True:
            return None
        body = ray_job_run(cron, when)
        existing = self.api.get(RAY_API, "rayjobs", ns, body["metadata"]["name"])
        job = existing or await self.create(cron, RAY_API, "rayjobs", body, "FailedToCreateRayJob")
        if job is not None:
            stored = self.api.get(RAY_API, "raycronjobs", ns, name)
            if stored is not None:
                stored["status"] = {"lastScheduleTime": body["metadata"]["annotations"][RAY_CRONJOB_TIMESTAMP]}
                self.api.put(stored)
        return job


def install_scheduled_spark(api: "FakeKubeAPI", chain: Any = None) -> ScheduledSpark:
    """Run the ScheduledSparkApplication controller on ``api`` (no webhook of its own meets admit's writes)."""
    return api.add_controller(ScheduledSpark(api))


def install_ray_cron_jobs(api: "FakeKubeAPI", chain: Any = None) -> RayCronJobs:
    """Run KubeRay's RayCronJob controller on ``api`` (gate ``RayCronJob`` on)."""
    return api.add_controller(RayCronJobs(api))


# ----------------------------------------------------------------------------------------------------------------------
# Later writes (tests/emulations/later.py): a wrapper's runs as its controller makes them on each due time, each
# run's pods as its own operator makes them, a user's suspend and resume of the schedule, a GitOps re-apply
# ----------------------------------------------------------------------------------------------------------------------

#: The due times the later writes fire the schedule at (3 minutes apart: ``@every 3m``, or two minutes of a cron).
TICKS = (datetime(2026, 12, 5, 6, 0, tzinfo=timezone.utc), datetime(2026, 12, 5, 6, 3, tzinfo=timezone.utc))
USER = {"username": "alice", "groups": ["system:authenticated"]}
_PLURALS = {"ScheduledSparkApplication": "scheduledsparkapplications", "RayCronJob": "raycronjobs"}


class Wrappers:
    """Both wrapper controllers with the operators of their runs (``tests.emulations.spark``, ``kuberay``), on one
    fake: what the registry's ``install`` gives."""

    def __init__(self, api: "FakeKubeAPI", chain: Any = None) -> None:
        self.api = api
        self.spark, self.ray = install_scheduled_spark(api, chain), install_ray_cron_jobs(api, chain)
        self.spark_op, self.ray_op = spark.install(api, chain), kuberay.install(api, chain)
        self.errors: list[tuple[str, str, str]] = []

    async def idle(self, timeout: float = 10.0) -> None:
        """Wait until the runs' operators (and every other controller of the fake) are done."""
        await self.spark_op.idle(timeout)
        await self.ray_op.idle(timeout)

    def runs(self, obj: JSON) -> list[JSON]:
        """The live runs of the user's wrapper ``obj`` (SparkApplications by label, RayJobs by controller)."""
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        if obj["kind"] == "ScheduledSparkApplication":
            return self.spark.runs(ns, name)
        cron = self.ray.live(RAY_API, "raycronjobs", ns, name)
        return self.ray.owned(RAY_API, "rayjobs", ns, cron["metadata"]["uid"]) if cron is not None else []


def install_wrappers(api: "FakeKubeAPI", chain: Any = None) -> Wrappers:
    """The registry's ``install``: :class:`Wrappers` on ``api``."""
    return Wrappers(api, chain)


async def _run_due(op: Wrappers, obj: JSON, when: datetime) -> None:
    ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    controller = op.spark if obj["kind"] == "ScheduledSparkApplication" else op.ray
    await controller.run_due(ns, name, when)
    await op.api.settle()
    await op.idle()


async def a_run_is_due(op: Wrappers, obj: JSON) -> None:
    """The schedule fires: the wrapper's controller makes its run, whose operator makes its pods."""
    await _run_due(op, obj, TICKS[0])


async def the_next_run_is_due(op: Wrappers, obj: JSON) -> None:
    """The schedule fires again while the first run runs (a ScheduledSparkApplication's ``concurrencyPolicy``
    decides: a second run beside it, none, or the first replaced; a RayCronJob makes one more)."""
    await _run_due(op, obj, TICKS[1])


async def suspend_and_resume(op: Wrappers, obj: JSON) -> None:
    """A user suspends the schedule (``spec.suspend: true``) and resumes it; a due time while suspended makes no run."""
    api, ns, name, plural = op.api, obj["metadata"]["namespace"], obj["metadata"]["name"], _PLURALS[obj["kind"]]
    for value in (True, False):
        stored = api.get(obj["apiVersion"], plural, ns, name)
        if stored is None:
            return
        stored["spec"]["suspend"] = value
        try:
            await api.admitted_update(api.resource_type(obj["apiVersion"], plural), ns, name, stored, dry_run=False,
                                      user=USER)
        except ApiError as e:
            op.errors.append((ns, name, f"the user's spec.suspend: {str(value).lower()} refused: {e.message}"))
        await op.api.settle()


async def gitops_reapply(op: Wrappers, obj: JSON) -> None:
    """A GitOps tool re-applies the user's wrapper manifest (``tests.emulations.gitops``)."""
    problem = await gitops.reapply(op.api, obj, _PLURALS[obj["kind"]])
    if problem is not None:
        op.errors.append((obj["metadata"]["namespace"], obj["metadata"]["name"], problem))


def gangs_of(op: Wrappers, obj: JSON) -> list[tuple[str, list[JSON]]]:
    """Each live run's gangs, as its operator's emulation counts them (each run is a gang of its own)."""
    if obj["kind"] == "ScheduledSparkApplication":
        return [g for run in op.runs(obj) for g in spark.gangs_of(op.spark_op, run)]
    return [g for run in op.runs(obj) for g in kuberay.gangs_of(op.ray_op, {**run, "apiVersion": RAY_API,
                                                                              "kind": "RayJob"})]


def refused_writes(op: Wrappers) -> list[tuple[str, str, str]]:
    """The wrapper controllers' refused runs, the run operators' refused writes, the later writes' problems."""
    return [*op.errors, *op.spark.errors, *op.ray.errors, *spark.refused_writes(op.spark_op),
            *kuberay.refused_writes(op.ray_op)]


_SPARK = "kubeflow/spark-operator v2.5.2 internal/controller/scheduledsparkapplication/controller.go Reconcile"
_RAY = "ray-project/kuberay v1.7.0 ray-operator/controllers/ray/raycronjob_controller.go Reconcile"
_ON = "ScheduledSparkApplication: always; RayCronJob: feature gate RayCronJob (alpha, off by default)"
LATER_WRITES = (
    reapply_write(gitops_reapply),
    LaterWrite("a run is due", f"{_SPARK}, createSparkApplication; {_RAY}, constructRayJob", _ON, lambda obj: True,
               a_run_is_due),
    LaterWrite("the next run is due while the last one runs", f"{_SPARK} (shouldStartNextRun: concurrencyPolicy "
               f"Allow, Forbid, Replace); {_RAY}", _ON, lambda obj: True, the_next_run_is_due),
    LaterWrite("user suspends and resumes the schedule", f"{_SPARK}; {_RAY} (spec.suspend)", "spec.suspend",
               lambda obj: True, suspend_and_resume),
)

LATER = Emulated("scheduled", install_wrappers, ((SPARK_API, "ScheduledSparkApplication"), (RAY_API, "RayCronJob")),
                 LATER_WRITES, gangs_of, refused_writes)
