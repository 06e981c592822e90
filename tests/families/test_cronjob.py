"""CronJobs (batch/v1): judged by the Job each schedule creates, never mutated (``families.apps.resolve_cronjob``).

The CronJob controller makes each Job as ``pkg/controller/cronjob/utils.go`` ``getJobFromTemplate2`` does: the
labels and annotations of ``spec.jobTemplate.metadata``, the name ``<cronjob>-<scheduled time in minutes>``, a
controller ownerReference to the CronJob; that Job goes through admission as any Job and is a gang of its own. The
manifests are shaped as ``kubectl create cronjob NAME --image=... --schedule=... -o yaml --dry-run=client`` writes
them (``jobTemplate.metadata.name`` included), with the gang fields added.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from admit.cli import main
from admit.config import Config
from admit.controller.claims import watched_kinds
from admit.families.apps import CRONJOB_SCHEDULED_ANNOTATION, job_from_cronjob
from admit.families.kinds import KINDS, WATCHED_RESOURCES, WEBHOOK_RESOURCES
from admit.webhook.admissionreview import parse_review, dumps
from admit.webhook.mutate import mutate
from admit.webhook.validate import validate
from tests.helpers import admission_review, decode_patch, eventually
from tests.webhook_stack import PG_API, cluster_with_controller, webhook_with_controller

LABEL = "scheduling.x-k8s.io/pod-group"


def cronjob(parallelism: int = 4, completions: int | None = 8, *, on_template: dict[str, str] | None = None,
            on_cronjob: dict[str, str] | None = None) -> dict[str, Any]:
    """``kubectl create cronjob nightly-eval --image=ghcr.io/example/eval:1.2 --schedule="0 2 * * *"`` with
    ``parallelism``, ``completions`` and the gang annotations ``on_template`` (``spec.jobTemplate.metadata``, default
    min-member 4) and ``on_cronjob`` (the CronJob's own metadata)."""
    spec: dict[str, Any] = {"parallelism": parallelism, "backoffLimit": 0, "template": {
        "metadata": {"creationTimestamp": None},
        "spec": {"restartPolicy": "Never", "containers": [
            {"name": "nightly-eval", "image": "ghcr.io/example/eval:1.2", "resources": {}}]}}}
    if completions is not None:
        spec["completions"] = completions
    template_meta: dict[str, Any] = {"creationTimestamp": None, "name": "nightly-eval"}
    annotations = {"gang.admit.dev/min-member": "4"} if on_template is None else on_template
    if annotations:
        template_meta["annotations"] = annotations
    meta: dict[str, Any] = {"creationTimestamp": None, "name": "nightly-eval", "namespace": "ml"}
    if on_cronjob:
        meta["annotations"] = on_cronjob
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta,
            "spec": {"jobTemplate": {"metadata": template_meta, "spec": spec}, "schedule": "0 2 * * *"},
            "status": {}}


def request(obj: dict[str, Any], operation: str = "CREATE", old: dict[str, Any] | None = None) -> Any:
    return parse_review(dumps(admission_review(obj, operation, old=old)))


def test_a_cronjob_whose_jobs_admit_would_refuse_is_refused_at_create_and_update_naming_its_job_template_fields():
    bad = cronjob(4, 5)
    for operation, old in (("CREATE", None), ("UPDATE", cronjob(4, 8))):
        verdict = validate(request(bad, operation, old), Config())
        assert not verdict.decision.allowed and verdict.decision.code == 403
        message = verdict.decision.message
        assert message.startswith("Set spec.jobTemplate.spec.completions to a multiple of 4 (e.g. 4 or 8), or set "
                                  "gang.admit.dev/min-member to at most 1: CronJob ml/nightly-eval: each Job it creates "
                                  "would be refused: ")
        assert "spec.jobTemplate.spec.completions=5 with spec.jobTemplate.spec.parallelism=4" in message
        assert "Set spec.jobTemplate.spec.completions to a multiple of 4 (e.g. 4 or 8)" in message
        assert "gang.admit.dev/min-member to at most 1" in message
    # the same Job alone is refused for the same reason (examples/denied/job-last-wave-below-min-member.yaml)
    job = job_from_cronjob(bad, "ml")
    alone = validate(request(job), Config()).decision
    assert not alone.allowed and "spec.completions=5 with spec.parallelism=4" in alone.message


def test_a_cronjob_whose_jobs_would_run_fewer_pods_than_min_member_is_refused_with_the_job_templates_parallelism():
    decision = validate(request(cronjob(2, 8)), Config()).decision
    assert not decision.allowed
    assert decision.message.startswith("Set spec.jobTemplate.spec.parallelism to at least 4, or lower "
                                       "gang.admit.dev/min-member: CronJob ml/nightly-eval: each Job it creates runs 2 "
                                       "pods (spec.jobTemplate.spec.parallelism=2) but its gang needs minMember 4")


def test_a_malformed_annotation_in_the_job_template_is_refused_as_the_jobs_would_be():
    decision = validate(request(cronjob(on_template={"gang.admit.dev/min-member": "four"})), Config()).decision
    assert not decision.allowed and decision.code == 400 and "gang.admit.dev/min-member" in decision.message


def test_a_cronjob_whose_job_template_is_a_valid_gang_is_allowed_with_no_patch_no_pod_group_and_no_managed_label():
    obj = cronjob(4, 8)
    for operation, old in (("CREATE", None), ("UPDATE", cronjob(4, 4))):
        assert mutate(request(obj, operation, old), Config()).patch == []
        verdict = validate(request(obj, operation, old), Config())
        assert verdict.decision.allowed and verdict.ensure is None and verdict.decision.warnings == []
        assert any("each Job it creates is a gang of its own (PodGroup nightly-eval-<scheduled time in minutes>, "
                   "minMember 4)" in n for n in verdict.decision.notes)


def test_the_job_a_cronjob_creates_is_built_as_get_job_from_template2_builds_it_and_is_ganged_under_its_own_name():
    obj = cronjob(4, 8)
    obj["metadata"]["uid"] = "6f0c2c2e-5d1e-4f57-9a57-1d4c0c8f0b11"
    job = job_from_cronjob(obj, "ml", minute=29_412_345)
    assert job["metadata"]["name"] == "nightly-eval-29412345"
    assert job["metadata"]["annotations"]["gang.admit.dev/min-member"] == "4"
    # 29412345 minutes after the epoch, in RFC 3339 as the CronJob controller writes it
    assert job["metadata"]["annotations"][CRONJOB_SCHEDULED_ANNOTATION] == "2025-12-03T05:45:00Z"
    assert job["metadata"]["ownerReferences"] == [{
        "apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly-eval",
        "uid": "6f0c2c2e-5d1e-4f57-9a57-1d4c0c8f0b11", "controller": True, "blockOwnerDeletion": True}]
    assert job["spec"] == obj["spec"]["jobTemplate"]["spec"] and job["spec"] is not obj["spec"]["jobTemplate"]["spec"]
    ops = mutate(request(job), Config()).patch  # a Job whose controller is a CronJob is no child: its own gang
    mutated = jsonpatch.apply_patch(job, ops)
    assert mutated["spec"]["template"]["metadata"]["labels"][LABEL] == "nightly-eval-29412345"
    verdict = validate(request(job), Config())
    assert verdict.decision.allowed and verdict.ensure is not None
    assert verdict.ensure.group_name == "nightly-eval-29412345" and verdict.ensure.min_member == 4


def test_gang_annotations_on_the_cronjobs_own_metadata_are_warned_about_only_while_its_job_template_has_none():
    own_only = cronjob(on_template={}, on_cronjob={"gang.admit.dev/min-member": "4"})
    decision = validate(request(own_only), Config()).decision
    assert decision.allowed
    (warning,) = decision.warnings
    assert "have no effect" in warning and "spec.jobTemplate.metadata.annotations" in warning
    both = cronjob(on_cronjob={"gang.admit.dev/min-member": "4"})
    decision = validate(request(both), Config()).decision
    assert decision.allowed and decision.warnings == []
    assert any("on its own metadata are not copied onto its Jobs" in n for n in decision.notes)
    assert validate(request(cronjob(on_template={})), Config()).decision.warnings == []  # no gang at all: silent


def test_a_job_template_that_names_one_pod_group_for_every_job_is_warned_about():
    shared = cronjob(on_template={"gang.admit.dev/min-member": "4", "gang.admit.dev/pod-group": "nightly"})
    decision = validate(request(shared), Config()).decision
    assert decision.allowed
    assert any(w.startswith("remove gang.admit.dev/pod-group (or the scheduling.x-k8s.io/pod-group label) under "
                            "spec.jobTemplate: every Job would name the same PodGroup") for w in decision.warnings)
    assert any("every Job it creates names PodGroup nightly" in n for n in decision.notes)


def test_the_controller_does_not_watch_cronjobs_and_the_webhooks_are_called_for_them():
    record = KINDS[("batch", "CronJob")]
    assert record.unwatched and record.children == () and not record.scalable
    assert ("batch", "CronJob") not in WATCHED_RESOURCES
    assert WEBHOOK_RESOURCES[("batch", "CronJob")] == (("v1", "cronjobs"),)
    kinds, notes = watched_kinds(Config())
    assert "CronJob" not in {w.resource.kind for w in kinds} and not any("CronJob" in n for n in notes)


def test_admit_review_refuses_the_cronjob_and_allows_the_good_one_as_the_webhook_does(tmp_path, capsys):
    import yaml

    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(cronjob(4, 5)))
    (tmp_path / "good.yaml").write_text(yaml.safe_dump(cronjob(4, 8)))
    assert main(["review", "--strict", "-v", str(tmp_path / "bad.yaml")]) == 1
    out = capsys.readouterr().out
    assert "CronJob ml/nightly-eval (CREATE" in out and "DENIED" in out
    assert "spec.jobTemplate.spec.completions=5 with spec.jobTemplate.spec.parallelism=4" in out
    assert main(["review", "--strict", "-v", str(tmp_path / "good.yaml")]) == 0
    out = capsys.readouterr().out
    assert "ALLOWED" in out and "patch:" not in out and "podGroup:" not in out


async def test_validate_over_http_refuses_the_cronjob_kube_apiserver_sends_and_allows_the_good_one(aiohttp_client,
                                                                                                  fake):
    async with webhook_with_controller(aiohttp_client, fake) as stack:
        bad = await stack.post("/validate", admission_review(cronjob(4, 5)))
        assert bad["allowed"] is False and bad["status"]["code"] == 403
        assert "spec.jobTemplate.spec.completions=5" in bad["status"]["message"]
        updated = await stack.post("/validate", admission_review(cronjob(4, 5), "UPDATE", old=cronjob(4, 8)))
        assert updated["allowed"] is False
        good = await stack.post("/validate", admission_review(cronjob(4, 8)))
        assert good["allowed"] is True and not good.get("warnings")
        mutated = await stack.post("/mutate", admission_review(cronjob(4, 8)))
        assert mutated["allowed"] is True and decode_patch({"response": mutated}) == []
        assert stack.pod_group_posts() == []


async def test_through_the_charts_rules_a_bad_cronjob_is_refused_and_the_good_ones_job_is_ganged(aiohttp_client,
                                                                                                fake):
    from admit.kube.client import KubeError

    async with cluster_with_controller(aiohttp_client, fake) as stack:
        with pytest.raises(KubeError) as refused:
            await stack.kube.request("POST", "/apis/batch/v1/namespaces/ml/cronjobs", body=cronjob(4, 5))
        assert "spec.jobTemplate.spec.completions=5" in str(refused.value)
        good = cronjob(4, 8)
        stored = await stack.kube.request("POST", "/apis/batch/v1/namespaces/ml/cronjobs", body=good)
        assert stored["spec"] == good["spec"] and LABEL not in str(stored)
        assert "gang.admit.dev/managed" not in (stored["metadata"].get("labels") or {})
        job = await stack.kube.request("POST", "/apis/batch/v1/namespaces/ml/jobs",
                                       body=job_from_cronjob(stored, "ml"))  # as the CronJob controller would
        assert job["spec"]["template"]["metadata"]["labels"][LABEL] == job["metadata"]["name"]
        await eventually(lambda: stack.fake.get(PG_API, "podgroups", "ml", job["metadata"]["name"]) is not None)
        pg = stack.fake.get(PG_API, "podgroups", "ml", job["metadata"]["name"])
        assert pg["spec"]["minMember"] == 4
        assert copy.deepcopy(stack.fake.get("batch/v1", "cronjobs", "ml", "nightly-eval"))["spec"] == good["spec"]


def test_admit_review_strict_passes_a_cronjob_annotated_on_both_its_metadata_and_its_job_template(tmp_path, capsys):
    import yaml

    (tmp_path / "both.yaml").write_text(yaml.safe_dump(cronjob(on_cronjob={"gang.admit.dev/min-member": "4"})))
    (tmp_path / "own.yaml").write_text(yaml.safe_dump(cronjob(on_template={},
                                                              on_cronjob={"gang.admit.dev/min-member": "4"})))
    assert main(["review", "--strict", str(tmp_path / "both.yaml")]) == 0
    capsys.readouterr()
    assert main(["review", "--strict", "-v", str(tmp_path / "own.yaml")]) == 1
    out = capsys.readouterr().out
    assert out.count("spec.jobTemplate.metadata.annotations") == 1 and "have no effect" in out


def test_admit_review_gives_a_refused_cronjob_no_note_of_the_gang_its_jobs_would_be(tmp_path, capsys):
    import yaml

    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(cronjob(4, 5)))  # the last wave of 1 pod: refused
    assert main(["review", "-v", str(tmp_path / "bad.yaml")]) == 1
    out = capsys.readouterr().out
    assert "each Job it creates would be refused" in out
    assert "note:" not in out and "a gang of its own" not in out and "with notes" not in out


def test_a_job_templates_backoff_limit_left_to_its_default_is_quoted_as_the_default_and_a_written_one_as_written():
    unwritten = cronjob(4, 8)
    del unwritten["spec"]["jobTemplate"]["spec"]["backoffLimit"]  # as kubectl create cronjob writes it: none
    notes = validate(request(unwritten), Config()).decision.notes
    assert any("spec.jobTemplate.spec.backoffLimit (default 6) replaces a failed pod" in n for n in notes), notes
    assert not any("backoffLimit=" in n for n in notes)
    written = cronjob(4, 8)
    written["spec"]["jobTemplate"]["spec"]["backoffLimit"] = 3
    notes = validate(request(written), Config()).decision.notes
    assert any("spec.jobTemplate.spec.backoffLimit=3 replaces a failed pod" in n for n in notes), notes
    job = job_from_cronjob(unwritten, "ml")
    job["metadata"]["annotations"] = {"gang.admit.dev/min-member": "4"}
    notes = validate(request(job), Config()).decision.notes
    assert any(n.startswith(f"Job ml/{job['metadata']['name']}: spec.backoffLimit (default 6) replaces") for n in notes)


def test_the_review_summary_counts_the_objects_with_notes_not_the_notes(tmp_path, capsys):
    import yaml

    unwritten = cronjob(4, 8)
    del unwritten["spec"]["jobTemplate"]["spec"]["backoffLimit"]  # two notes: the backoffLimit one and its gang
    (tmp_path / "good.yaml").write_text(yaml.safe_dump(unwritten))
    assert main(["review", "-v", str(tmp_path / "good.yaml")]) == 0
    out = capsys.readouterr().out
    assert out.count("  note: ") == 2 and "(1 object with notes)" in out
