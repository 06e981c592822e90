"""One gang mechanism per workload when the workload controllers make native gangs themselves (KEP-5547 Job
``spec.scheduling`` with WorkloadWithJob; Deployment/StatefulSet ``spec.scheduling``): admit hands a Job over when
told to, and never leaves its own Coscheduling label, schedulerName or ``schedulingGroup`` on a template that another
webhook (Kueue) turned into a native gang after admit's ran; consistent across ``/mutate`` reinvocation, with a
warning that says which way the workload went."""

import copy

import jsonpatch
import pytest

from admit.webhook.admission import Admission
from admit.config import Config
from admit.kube.client import KubeAPI
from admit.webhook.mutate import mutate
from admit.webhook.app import create_app
from admit.testing.fake_kube import FakeKubeAPI
from admit.webhook.validate import validate
from tests.helpers import admission_review, apply_answer, example
from tests.backends.test_backends import req

COS = Config()
BETA = Config(gang_backend="workload-api", workload_api_version="v1beta1")
HANDING = Config(gang_backend="workload-api", workload_api_version="v1beta1", controller_gangs=frozenset({"Job"}))
LABEL = "scheduling.x-k8s.io/pod-group"


def kueue_mutates(job):
    """What Kueue's Job webhook does to a Job it manages with gang defaulting (kueue KEP-13715, PR#14091): suspend
    it, and set ``spec.scheduling.schedulingPolicy.gang: {}`` when no policy was chosen (the Job controller then
    takes minCount from parallelism)."""
    out = copy.deepcopy(job)
    out["metadata"].setdefault("labels", {})["kueue.x-k8s.io/queue-name"] = "team-a-queue"
    out["spec"]["suspend"] = True
    out["spec"].setdefault("scheduling", {"schedulingPolicy": {"gang": {}}})
    return out


def mutate_pass(obj, config):
    decision = mutate(req(obj), config)
    return jsonpatch.apply_patch(obj, decision.patch), decision


def template_spec(job):
    return job["spec"]["template"]["spec"]


def test_with_controller_gang_job_admit_hands_a_new_job_to_the_job_controller_and_makes_no_gang_of_its_own():
    job = example("training-job.yaml")
    once, decision = mutate_pass(job, HANDING)
    assert once["spec"]["scheduling"] == {"schedulingPolicy": {"gang": {"minCount": 4}}}
    assert "schedulingGroup" not in template_spec(once)
    assert "gang.admit.dev/managed" not in (once["metadata"].get("labels") or {})
    assert any("goes to the Job controller's native gang" in n for n in decision.notes)
    again = mutate(req(once), HANDING)  # reinvocation: the same mechanism, nothing more to write
    assert again.patch == [] and any("sets spec.scheduling" in n for n in again.notes)
    verdict = validate(req(once), HANDING)
    assert verdict.decision.allowed and (verdict.ensure is None or not verdict.ensure.create_pod_group)


def test_without_controller_gang_a_job_still_gets_admits_workload_and_pod_group():
    once, _ = mutate_pass(example("training-job.yaml"), BETA)
    assert "scheduling" not in once["spec"]
    assert template_spec(once)["schedulingGroup"] == {"podGroupName": "allreduce"}


def test_a_job_update_is_never_handed_over_its_template_and_scheduling_are_fixed_at_creation():
    created, _ = mutate_pass(example("training-job.yaml"), BETA)  # admit's own gang from before the flag
    new = copy.deepcopy(created)
    new["spec"]["parallelism"] = 4
    decision = mutate(req(new, "UPDATE", old=created), HANDING)
    assert all(op["path"] != "/spec/scheduling" for op in decision.patch)


@pytest.mark.parametrize("config", [COS, BETA], ids=["coscheduling", "workload-api"])
def test_a_job_kueue_turns_into_a_native_gang_after_admit_ran_loses_admits_marks_on_reinvocation(config):
    job = example("training-job.yaml")
    first, _ = mutate_pass(job, config)  # admit's webhook first (names sort that way)
    if config is COS:
        assert first["spec"]["template"]["metadata"]["labels"][LABEL] == "allreduce"
        assert template_spec(first)["schedulerName"] == config.scheduler_name
    else:
        assert template_spec(first)["schedulingGroup"] == {"podGroupName": "allreduce"}
    by_kueue = kueue_mutates(first)
    final, decision = mutate_pass(by_kueue, config)  # kube-apiserver re-invokes admit (reinvocationPolicy IfNeeded)
    labels = final["spec"]["template"]["metadata"].get("labels") or {}
    assert LABEL not in labels
    assert template_spec(final).get("schedulerName", "default-scheduler") == "default-scheduler"
    assert "schedulingGroup" not in template_spec(final)  # the Job controller refuses it beside spec.scheduling
    assert "gang.admit.dev/managed" not in final["metadata"]["labels"]
    assert final["spec"]["scheduling"] == {"schedulingPolicy": {"gang": {}}}
    assert any(w.startswith("nothing to change: spec.scheduling") and "admit dropped its own gang" in w
               for w in decision.warnings)
    steady = mutate(req(final), config)  # any further reinvocation changes nothing
    assert steady.patch == []
    verdict = validate(req(final), config)
    assert verdict.decision.allowed and (verdict.ensure is None or not verdict.ensure.create_pod_group)


async def test_against_the_fake_a_kueue_gang_job_gets_no_admit_pod_group_or_workload(aiohttp_client):
    async with FakeKubeAPI(workload_api="v1beta1") as fake:
        async with fake.api_client() as api_client:
            client = await aiohttp_client(create_app(Admission(BETA, KubeAPI(api_client))))

            async def post(path, obj):
                resp = await client.post(path, json=admission_review(obj))
                return (await resp.json())["response"]

            first = apply_answer(example("training-job.yaml"), {"response": await post("/mutate",
                                                                                         example("training-job.yaml"))})
            final_obj = kueue_mutates(first)
            answer = await post("/mutate", final_obj)
            final_obj = apply_answer(final_obj, {"response": answer})
            verdict = await post("/validate", final_obj)
            assert verdict["allowed"] is True
            assert not any("sets spec.scheduling" in w for w in verdict.get("warnings", []))  # a note, offline
            assert any("sets spec.scheduling" in n for n in validate(req(final_obj), BETA).decision.notes)
            assert [r for r in fake.requests if r.resource in ("workloads", "podgroups") and r.method == "POST"] == []


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet"])
def test_a_deployment_or_statefulset_with_spec_scheduling_is_left_to_its_controller(kind):
    obj = example("pause-gang-deployment.yaml")
    obj["kind"] = kind
    if kind == "StatefulSet":
        obj["spec"]["serviceName"] = "pause"
        obj["spec"]["podManagementPolicy"] = "Parallel"
    obj["spec"]["strategy" if kind == "Deployment" else "updateStrategy"] = {"type": "Recreate" if kind == "Deployment"
                                                                              else "RollingUpdate"}
    obj["spec"]["scheduling"] = {"schedulingPolicy": {"gang": {"minCount": 3}}}
    decision = mutate(req(obj), BETA)
    assert decision.patch == []
    assert any(f"the {kind} controller makes" in n for n in decision.notes)
