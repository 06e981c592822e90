"""Workload families: one module per family of gang workload kinds, over the shared rules in ``shared.py``.

``jobset`` (JobSet), ``lws`` (LeaderWorkerSet), ``ray`` (RayCluster, RayJob, RayService), ``trainer`` (Kubeflow
Trainer v2 TrainJob). Each declares its kinds as :class:`admit.families.shared.WorkloadKind` records (``KINDS``);
``admit.kinds`` registers them. The built-in apps/batch kinds, Kubeflow v1 and Spark still live in
``admit/workloads.py``, ``admit/kubeflow.py`` and ``admit/spark.py``.
"""

from __future__ import annotations

from . import jobset, lws, ray, trainer
from .shared import WorkloadKind

__all__ = ["FAMILY_KINDS", "WorkloadKind"]

FAMILY_KINDS: tuple[WorkloadKind, ...] = (*jobset.KINDS, *lws.KINDS, *ray.KINDS, *trainer.KINDS)
"""Every kind of the family modules, in registration order."""
