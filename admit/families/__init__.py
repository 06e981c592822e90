"""Workload families: one module per family of gang workload kinds, over the shared rules in ``shared.py``.

``apps`` (Deployment, ReplicaSet, StatefulSet, Job), ``spark`` (SparkApplication, and bare Pods: spark-submit drivers
and other bare pods), ``spark_connect`` (SparkConnect), ``kubeflow`` (Kubeflow v1 training jobs), ``jobset`` (JobSet), ``lws`` (LeaderWorkerSet),
``ray`` (RayCluster, RayJob, RayService), ``trainer`` (Kubeflow Trainer v2 TrainJob), ``wrappers`` (ScheduledSparkApplication, RayCronJob: judged by the run
they make, their gang annotations carried through the template). Each declares its kinds in one
place, as :class:`admit.families.shared.WorkloadKind` records (``KINDS``: resolver, watched versions, children,
``*/scale``); ``admit.families.kinds`` registers them. Adding a kind is adding a record (and a module for a new
family, listed here).
"""

from __future__ import annotations

from . import apps, jobset, kubeflow, lws, ray, spark, spark_connect, trainer, wrappers
from .shared import WorkloadKind

__all__ = ["FAMILY_KINDS", "WorkloadKind"]

FAMILY_KINDS: tuple[WorkloadKind, ...] = (*apps.KINDS, *spark.KINDS, *spark_connect.KINDS, *kubeflow.KINDS, *jobset.KINDS, *lws.KINDS,
                                          *ray.KINDS, *trainer.KINDS, *wrappers.KINDS)
"""Every kind of the family modules, in registration order."""
