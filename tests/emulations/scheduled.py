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

from .kit import OperatorEmulation, controller_ref, service_account

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
