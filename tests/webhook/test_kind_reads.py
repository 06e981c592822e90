"""A kind's admission-time read is a fact of its ``WorkloadKind`` record (``admission_read``): the webhook reads and
judges what the record says, and names no kind itself (a TrainJob's ClusterTrainingRuntime, read once at CREATE)."""

from __future__ import annotations

from pathlib import Path

from admit.config import Config
from admit.families.kinds import KINDS, READS
from admit.families.trainer import runtime_read
from admit.webhook.admission import Admission
from admit.webhook.admissionreview import dumps, parse_review
from admit.webhook.validate import validate
from tests.helpers import ROOT, admission_review

TRAINJOB = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
    "metadata": {"name": "mnist", "namespace": "ml", "annotations": {"gang.admit.dev/min-member": "2"}},
    "spec": {"runtimeRef": {"name": "torch-distributed", "kind": "ClusterTrainingRuntime"},
             "trainer": {"numNodes": 2}},
}


class Store:
    """One object to read; records the reads."""

    def __init__(self, obj=None) -> None:
        self.obj = obj
        self.reads: list[tuple[str, str, str, str, str]] = []

    async def get_object(self, group, version, plural, namespace, name, timeout):
        self.reads.append((group, version, plural, namespace, name))
        return self.obj


def test_the_trainjob_record_says_what_its_admission_reads_and_no_other_kind_reads_anything():
    assert READS == {("trainer.kubeflow.org", "TrainJob"): runtime_read}
    assert KINDS[("trainer.kubeflow.org", "TrainJob")].admission_read is runtime_read
    for module in ("admission.py", "validate.py"):
        source = (ROOT / "admit" / "webhook" / module).read_text()
        assert "TrainJob\"" not in source and "trainer.kubeflow.org" not in source, module


async def test_a_trainjob_create_reads_its_cluster_training_runtime_once_and_warns_when_it_is_missing():
    req = parse_review(dumps(admission_review(TRAINJOB)))
    verdict = validate(req, Config())
    assert verdict.read is not None
    assert (verdict.read.group, verdict.read.plural, verdict.read.namespace, verdict.read.name) == (
        "trainer.kubeflow.org", "clustertrainingruntimes", "", "torch-distributed")
    store = Store()
    decision = await Admission(Config(), store).validate(req)
    assert decision.allowed and store.reads == [("trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", "",
                                                 "torch-distributed")]
    assert any(w.startswith("create ClusterTrainingRuntime torch-distributed (or correct spec.runtimeRef)")
               for w in decision.warnings)


def test_a_trainjob_update_reads_nothing():
    req = parse_review(dumps(admission_review(TRAINJOB, "UPDATE", old=TRAINJOB)))
    assert validate(req, Config()).read is None
