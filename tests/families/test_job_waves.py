"""The gang must hold for every wave of a Job, not only the first.

kube-scheduler's pod informer drops finished pods (``status.phase!=Succeeded,status.phase!=Failed``), so once a
Job's first pods have finished, Coscheduling counts only the pods of the next wave. A Job of ``completions: 5``,
``parallelism: 4`` ends with a wave of 1 pod; an Indexed Job with ``backoffLimitPerIndex`` retries a failed index
with a pod of its own. With ``min-member: auto`` admit sizes the gang so every wave starts; a fixed min-member
larger than a wave is refused, naming the numbers. Over HTTP with the controller running.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from admit.families.apps import job_last_wave
from tests.helpers import GC_ORPHANS_AFTER, admission_review, apply_answer, eventually, example
from tests.webhook_stack import webhook_with_controller

pytestmark = pytest.mark.fake_api(gc_orphans_after=GC_ORPHANS_AFTER)


def batch_job(name: str, parallelism: int, completions: int | None, min_member: str = "auto",
              **spec: Any) -> dict[str, Any]:
    """``examples/training-job.yaml`` (Indexed, init container, GPU worker) with other numbers."""
    job = example("training-job.yaml")
    job["metadata"]["name"] = name
    job["metadata"]["annotations"]["gang.admit.dev/min-member"] = min_member
    job["spec"]["parallelism"] = parallelism
    if completions is None:
        del job["spec"]["completions"]
    else:
        job["spec"]["completions"] = completions
    job["spec"].update(spec)
    return job


async def admit(stack: Any, job: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """/mutate then /validate as kube-apiserver calls them; returns (mutate answer, validate answer)."""
    mutation = await stack.post("/mutate", admission_review(job))
    mutated = apply_answer(job, {"response": mutation})
    return mutation, await stack.post("/validate", admission_review(mutated))


def test_waves_of_a_job_from_its_numbers():
    assert job_last_wave(4, 8, False, None) is None  # 4 + 4
    assert job_last_wave(4, None, False, None) is None  # a work queue: no completions count
    assert job_last_wave(4, 3, False, None) is None  # capped: one wave of 3
    wave = job_last_wave(4, 5, False, None)
    assert wave is not None and wave.size == 1
    assert wave.why == ("spec.completions=5 with spec.parallelism=4 ends with a last wave of 1 pod once the first 4 "
                        "completions have finished")
    assert wave.fix == "set spec.completions to a multiple of 4 (e.g. 4 or 8)"
    indexed = job_last_wave(4, 10, True, None)
    assert indexed is not None and indexed.size == 2 and "(indexes 8..9)" in indexed.why
    retried = job_last_wave(4, 8, True, 2)
    assert retried is not None and retried.size == 1 and "spec.backoffLimitPerIndex=2" in retried.why
    assert job_last_wave(4, 8, True, 0) is None  # no per-index retries


async def test_auto_sizes_the_gang_of_parallelism_4_completions_5_so_the_fifth_pod_can_start(aiohttp_client, fake):
    async with webhook_with_controller(aiohttp_client, fake) as stack:
        job = batch_job("tail", 4, 5)
        mutation, validation = await admit(stack, job)
        assert validation["allowed"] is True
        assert stack.pod_group("ml", "tail")["spec"]["minMember"] == 1
        warning = ("set spec.completions to a multiple of 4 (e.g. 4 or 8) to gang 4 pods: a last wave of 1 pod makes "
                   "the auto minMember 1, no gang (docs/workloads.md#the-last-wave-of-a-job)")
        assert warning in mutation["warnings"] and warning in validation["warnings"]
        # The controller, which resolves the stored Job the same way, keeps the group at 1.
        stored = await stack.kube.request("POST", "/apis/batch/v1/namespaces/ml/jobs",
                                          body=apply_answer(job, {"response": mutation}))
        await eventually(lambda: (stack.pod_group("ml", "tail") or {}).get("metadata", {}).get("ownerReferences"))
        assert stack.pod_group("ml", "tail")["spec"]["minMember"] == 1
        assert stored["metadata"]["name"] == "tail"


async def test_auto_takes_the_last_wave_when_it_is_smaller_and_keeps_parallelism_when_waves_are_even(
        aiohttp_client, fake):
    async with webhook_with_controller(aiohttp_client, fake) as stack:
        _, uneven = await admit(stack, batch_job("six", 4, 6, completionMode="NonIndexed"))
        _, even = await admit(stack, batch_job("eight", 4, 8))
        assert uneven["allowed"] and even["allowed"]
        assert stack.pod_group("ml", "six")["spec"]["minMember"] == 2
        assert stack.pod_group("ml", "eight")["spec"]["minMember"] == 4
        assert not [w for w in even.get("warnings", []) if "wave" in w]
        # minResources follows the smaller gang: 2 pods of max(2 cpu + 0, init 250m) and max(1Gi, init 2Gi) each.
        assert stack.pod_group("ml", "six")["spec"]["minResources"] == {"cpu": "4", "memory": "4Gi",
                                                                         "nvidia.com/gpu": "2"}


async def test_a_fixed_min_member_larger_than_the_last_wave_is_refused_naming_the_numbers(aiohttp_client, fake):
    async with webhook_with_controller(aiohttp_client, fake) as stack:
        job = batch_job("tail", 4, 5, min_member="4", completionMode="NonIndexed")
        _, validation = await admit(stack, job)
        assert validation["allowed"] is False and validation["status"]["code"] == 403
        assert validation["status"]["message"] == (
            "Set spec.completions to a multiple of 4 (e.g. 4 or 8), or set gang.admit.dev/min-member to at most 1: "
            "Job ml/tail: spec.completions=5 with spec.parallelism=4 ends with a last wave of 1 pod once the first 4 "
            "completions have finished, fewer than its gang minMember 4 (gang.admit.dev/min-member=4); kube-scheduler "
            "does not count finished pods, so the Coscheduling plugin would keep that pod Pending forever")
        assert stack.pod_group_posts() == []


async def test_an_indexed_job_whose_last_indexes_are_fewer_than_min_member_is_refused(aiohttp_client, fake):
    async with webhook_with_controller(aiohttp_client, fake) as stack:
        _, validation = await admit(stack, batch_job("shards", 4, 10, min_member="3"))
        assert validation["allowed"] is False
        message = validation["status"]["message"]
        assert "completionMode Indexed with spec.completions=10 and spec.parallelism=4" in message
        assert "last wave of 2 pods (indexes 8..9)" in message and "minMember 3" in message
        assert "at most 2" in message
        _, fits = await admit(stack, batch_job("shards", 4, 10, min_member="2"))
        assert fits["allowed"] is True and stack.pod_group("ml", "shards")["spec"]["minMember"] == 2


async def test_per_index_retries_are_waves_of_one_pod(aiohttp_client, fake):
    async with webhook_with_controller(aiohttp_client, fake) as stack:
        _, fixed = await admit(stack, batch_job("retry", 4, 4, min_member="4", backoffLimitPerIndex=1,
                                                maxFailedIndexes=2))
        assert fixed["allowed"] is False
        assert "spec.backoffLimitPerIndex=1 retries a failed index with a pod of its own" in fixed["status"]["message"]
        assert "Set spec.backoffLimitPerIndex to 0" in fixed["status"]["message"]
        _, auto = await admit(stack, batch_job("retry-auto", 4, 4, backoffLimitPerIndex=1))
        assert auto["allowed"] is True and stack.pod_group("ml", "retry-auto")["spec"]["minMember"] == 1
        _, no_retry = await admit(stack, batch_job("no-retry", 4, 4, min_member="4", backoffLimitPerIndex=0))
        assert no_retry["allowed"] is True and stack.pod_group("ml", "no-retry")["spec"]["minMember"] == 4


async def test_an_update_raising_parallelism_past_the_last_wave_is_refused(aiohttp_client, fake):
    async with webhook_with_controller(aiohttp_client, fake) as stack:
        job = batch_job("grow", 4, 8, min_member="4")
        mutation, validation = await admit(stack, job)
        assert validation["allowed"]
        stored = apply_answer(job, {"response": mutation})
        changed = copy.deepcopy(stored)
        changed["spec"]["parallelism"] = 6  # 8 = 6 + 2: the second wave has 2 pods
        answer = await stack.post("/validate", admission_review(changed, "UPDATE", old=stored))
        assert answer["allowed"] is False and "last wave of 2 pods" in answer["status"]["message"]
