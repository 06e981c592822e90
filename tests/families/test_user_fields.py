"""Every example and test manifest, with ordinary labels and annotations on every pod template, through the path of
``admit review`` (``admit.cli.review.review_documents``: ``/mutate``, the patch applied with ``jsonpatch``, then
``/validate``), keeps every field it had except admit's own (``admit.families.owned.OWNED_FIELDS``).

The planted keys are what platform teams add (``team``, ``sidecar.istio.io/inject``, a cost-center key,
``prometheus.io/scrape``): NetworkPolicies, Istio injection and operators' selectors depend on them, and the webhook
runs with ``failurePolicy: Fail`` on every gang workload, so a lost label breaks them with no word.
"""

from __future__ import annotations

import asyncio
import copy

import pytest

from admit.config import Config
from admit.cli.review import review_documents
from tests.manifest_seeds import (
    ORDINARY_ANNOTATIONS, ORDINARY_LABELS, all_manifests, at, lost_fields, object_of, plant_ordinary, pod_templates,
)

CONFIG = Config()


def _planted() -> list[tuple[str, dict]]:
    out = []
    for source, doc in all_manifests():
        if doc.get("kind") == "AdmissionReview":
            doc = copy.deepcopy(doc)
            doc["request"]["object"] = plant_ordinary(doc["request"]["object"])
        else:
            doc = plant_ordinary(doc)
        out.append((source, doc))
    return out


PLANTED = _planted()


def test_every_example_and_test_manifest_keeps_every_field_but_admits_own_through_admit_review():
    results = asyncio.run(review_documents(PLANTED, CONFIG))
    assert len(results) == len(PLANTED)
    lost = {}
    for (source, doc), result in zip(PLANTED, results):
        before, after = object_of(doc), result["object"]
        if before is None or after is None:
            continue
        missing = lost_fields(before, after, CONFIG)
        if missing:
            lost[f"{source} ({before.get('kind')})"] = missing[:5]
    kept = len(PLANTED) - len(lost)
    assert not lost, f"{kept} of {len(PLANTED)} objects keep every field; lost: {lost}"


def test_the_planted_labels_reach_every_pod_template_of_every_manifest_that_has_one():
    """The check above is only as good as the planting: every pod template (JobSet replicatedJobs, Ray worker
    groups, Kubeflow replicas, LWS templates, Spark driver and executor) carries the ordinary keys."""
    templates = 0
    for _, doc in PLANTED:
        obj = object_of(doc)
        for path in pod_templates(obj):
            node = at(obj, path)
            meta = node if path[-1:] in (("driver",), ("executor",)) else node["metadata"]
            assert set(ORDINARY_LABELS) <= set(meta["labels"]) and set(ORDINARY_ANNOTATIONS) <= set(meta["annotations"])
            templates += 1
    kinds = {object_of(d).get("kind") for _, d in PLANTED if object_of(d)}
    assert {"JobSet", "RayCluster", "RayJob", "RayService", "LeaderWorkerSet", "TFJob", "SparkApplication"} <= kinds
    assert templates > len(PLANTED)


@pytest.mark.parametrize("name", ["jobset-pytorch.yaml", "raycluster-autoscaler.yaml"])
def test_a_jobset_and_a_ray_worker_group_keep_the_users_template_labels_beside_the_group_label(name):
    source, doc = next((s, d) for s, d in PLANTED if s.endswith(f"examples/{name}#0"))
    result = asyncio.run(review_documents([(source, doc)], CONFIG))[0]
    obj = result["object"]
    templates = [at(obj, p) for p in pod_templates(obj)]
    assert len(templates) >= 2
    for template in templates:
        labels = template["metadata"]["labels"]
        assert {k: labels[k] for k in ORDINARY_LABELS} == ORDINARY_LABELS
        assert labels["scheduling.x-k8s.io/pod-group"] == doc["metadata"]["name"]
