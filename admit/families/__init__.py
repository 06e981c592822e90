"""Workload families: one module per family of gang workload kinds, over the shared rules in ``shared.py``.

``jobset`` (JobSet), ``lws`` (LeaderWorkerSet), ``ray`` (RayCluster, RayJob, RayService), ``trainer`` (Kubeflow
Trainer v2 TrainJob). Each declares its kinds as :class:`admit.families.shared.WorkloadKind` records (``KINDS``);
``admit.families.kinds`` registers them. The built-in apps/batch kinds (``apps``), Kubeflow v1 (``kubeflow``) and Spark
(``spark``) have their resolvers here too, registered in ``admit.families.kinds`` directly.
"""

from __future__ import annotations

from . import jobset, lws, ray, trainer
from .shared import WorkloadKind

__all__ = ["FAMILY_KINDS", "WorkloadKind"]

FAMILY_KINDS: tuple[WorkloadKind, ...] = (*jobset.KINDS, *lws.KINDS, *ray.KINDS, *trainer.KINDS)
"""Every kind of the family modules, in registration order."""
