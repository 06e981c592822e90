"""admit/controller/keyloop.py: the one key loop every gang controller runs (``gangs.GangController``'s workers):
what happens to a key whose reconcile fails, and the once-per-change reports.

The errors are shaped as the API client raises them (``kube.client.KubeError`` with the request in its message) and
as ``gangs.GangController`` re-raises a failed write (``"cannot create PodGroup ..."``).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import pytest

from admit.controller.keyloop import KeyLoop
from admit.controller.leader import NotLeader
from admit.controller.settings import ControllerSettings
from admit.kube.client import KubeError

WEB = ("team-a", "web")
TRAIN = ("ml", "train")
LOG = logging.getLogger("admit.controller.test-keyloop")
ETCD_TIMEOUT = KubeError(500, "InternalError", "PATCH /apis/scheduling.x-k8s.io/v1alpha1/namespaces/team-a/podgroups/"
                                              "web: 500 InternalError: etcdserver: request timed out")


@dataclass
class Leading:
    """Whether the replica leads, as the controllers' ``_leading`` flag says."""

    value: bool = True

    def __call__(self) -> bool:
        return self.value


def key_loop(reconcile, leading: Leading | None = None, **settings) -> KeyLoop:
    return KeyLoop(reconcile, ControllerSettings(**settings), leading=leading or Leading(),
                   subject=lambda key: f"PodGroup {key[0]}/{key[1]}", log=LOG)


class Reconcile:
    """A reconcile that raises the queued ``errors`` one per call, then succeeds; ``calls``: the keys it was given."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls: list[tuple[str, str]] = []

    async def __call__(self, key: tuple[str, str]) -> None:
        self.calls.append(key)
        if self.errors:
            raise self.errors.pop(0)


async def next_key(loop: KeyLoop, timeout: float = 2.0) -> tuple[str, str]:
    return await asyncio.wait_for(loop.queue.get(), timeout)


def test_the_backoff_doubles_per_failure_in_a_row_from_half_a_second_to_a_minute_with_a_jitter_of_up_to_a_quarter():
    loop = key_loop(Reconcile())
    delays = [loop.backoff(WEB) for _ in range(10)]
    for n, delay in enumerate(delays):
        full = min(60.0, 0.5 * 2 ** n)
        assert 0.75 * full <= delay <= full, (n, delay)
    assert loop.failures[WEB] == 10 and TRAIN not in loop.failures  # counted per key
    assert loop.backoff(TRAIN) <= 0.5


async def test_an_api_error_is_retried_after_the_backoff_and_its_warning_is_logged_once_while_it_lasts(caplog):
    reconcile = Reconcile(ETCD_TIMEOUT, ETCD_TIMEOUT, ETCD_TIMEOUT)
    loop = key_loop(reconcile, retry_backoff=(0.01, 0.04))
    loop.queue.add(WEB)
    with caplog.at_level(logging.WARNING, logger=LOG.name):
        for _ in range(4):  # three failures, each bringing the key back, then a success
            await loop.process(await next_key(loop))
    assert reconcile.calls == [WEB] * 4
    assert [r.getMessage() for r in caplog.records] == [
        f"PodGroup team-a/web: {ETCD_TIMEOUT.message}; retrying with backoff (0.01s doubling to 0.04s)"]
    assert WEB not in loop.failures and loop.topics(WEB) == []  # the success forgot the count and the report
    with pytest.raises(TimeoutError):
        await next_key(loop, timeout=0.1)  # and nothing brings the key back


async def test_a_failure_after_the_key_recovered_is_logged_again(caplog):
    reconcile = Reconcile(ETCD_TIMEOUT)
    loop = key_loop(reconcile, retry_backoff=(0.01, 0.04))
    loop.queue.add(WEB)
    with caplog.at_level(logging.WARNING, logger=LOG.name):
        await loop.process(await next_key(loop))
        await loop.process(await next_key(loop))  # recovered
        reconcile.errors.append(ETCD_TIMEOUT)  # the API fails again later
        loop.queue.add(WEB)
        await loop.process(await next_key(loop))
    assert len(caplog.records) == 2 and caplog.records[0].getMessage() == caplog.records[1].getMessage()
    assert loop.failures[WEB] == 1  # counted from the start again


async def test_a_failed_write_whose_message_names_the_podgroup_is_reported_as_it_is(caplog):
    why = ("cannot create PodGroup team-a/web for Deployment team-a/web: POST /apis/scheduling.x-k8s.io/v1alpha1/"
           "namespaces/team-a/podgroups: 403 Forbidden: podgroups.scheduling.x-k8s.io is forbidden")
    loop = key_loop(Reconcile(KubeError(403, "Forbidden", why)), retry_backoff=(0.01, 0.04))
    loop.queue.add(WEB)
    with caplog.at_level(logging.WARNING, logger=LOG.name):
        await loop.process(await next_key(loop))
    assert caplog.records[0].getMessage() == f"{why}; retrying with backoff (0.01s doubling to 0.04s)"


async def test_a_bug_in_a_reconcile_is_logged_with_its_traceback_retried_and_the_worker_goes_on_with_other_keys(caplog):
    reconcile = Reconcile(KeyError("spec"))
    loop = key_loop(reconcile, retry_backoff=(0.05, 0.1))
    worker = asyncio.create_task(loop.worker())
    try:
        with caplog.at_level(logging.WARNING, logger=LOG.name):
            loop.queue.add(WEB)
            loop.queue.add(TRAIN)
            for _ in range(100):
                await asyncio.sleep(0.01)
                if reconcile.calls.count(WEB) == 2:
                    break
    finally:
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
    assert reconcile.calls == [WEB, TRAIN, WEB]
    bug, retry = caplog.records
    assert bug.getMessage() == "reconcile of PodGroup team-a/web failed" and bug.exc_info[0] is KeyError
    assert retry.getMessage() == ("PodGroup team-a/web: internal error (KeyError); retrying with backoff "
                                  "(0.05s doubling to 0.1s)")


async def test_a_write_that_found_the_lease_not_held_is_looked_at_again_after_the_retry_period_only_while_leading():
    leading = Leading()
    loop = key_loop(Reconcile(NotLeader(), NotLeader()), leading, retry_period=0.05)
    loop.queue.add(WEB)
    await loop.process(await next_key(loop))
    assert await next_key(loop) == WEB  # a late renewal kept this replica leading: the key comes back
    assert WEB not in loop.failures  # not a failure of the key: no backoff grows
    leading.value = False
    await loop.process(WEB)
    with pytest.raises(TimeoutError):
        await next_key(loop, timeout=0.2)


async def test_a_retry_after_the_replica_stopped_leading_queues_nothing():
    leading = Leading(False)
    loop = key_loop(Reconcile(ETCD_TIMEOUT), leading, retry_backoff=(0.01, 0.04))
    loop.queue.add(WEB)
    await loop.process(await next_key(loop))
    with pytest.raises(TimeoutError):
        await next_key(loop, timeout=0.1)
    assert loop.failures[WEB] == 1


async def test_reset_drops_the_delayed_keys_and_the_failure_counts_but_keeps_what_was_reported():
    loop = key_loop(Reconcile(ETCD_TIMEOUT), retry_backoff=(0.05, 0.1))
    loop.queue.add(WEB)
    await loop.process(await next_key(loop))
    loop.reset()
    assert loop.failures == {} and loop.topics(WEB) == ["retry"]
    with pytest.raises(TimeoutError):
        await next_key(loop, timeout=0.2)


def test_a_report_is_logged_once_per_change_per_topic_and_again_once_resolved(caplog):
    loop = key_loop(Reconcile())
    taken = "PodGroup team-a/web is named by Deployment team-a/web and by Job team-a/web"
    with caplog.at_level(logging.INFO, logger=LOG.name):
        assert loop.report(WEB, "other:batch/Job/web", taken)
        assert not loop.report(WEB, "other:batch/Job/web", taken)  # the same: not again
        assert loop.report(WEB, "problem:apps/Deployment/web", "Deployment team-a/web: replicas 1 < minMember 2")
        assert loop.report(TRAIN, "other:batch/Job/web", taken)  # another key
        loop.resolved(WEB, "other:batch/Job/web")
        assert loop.topics(WEB) == ["problem:apps/Deployment/web"]
        assert loop.report(WEB, "other:batch/Job/web", taken, level=logging.INFO)  # it came back
        assert not loop.record(WEB, "other:batch/Job/web", taken)
        assert loop.record(WEB, "fail", "cannot update PodGroup team-a/web: 422 Invalid")  # recorded, not logged
        loop.forget(WEB)
        assert loop.topics(WEB) == [] and loop.topics(TRAIN) == ["other:batch/Job/web"]
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, taken), (logging.WARNING, "Deployment team-a/web: replicas 1 < minMember 2"),
        (logging.WARNING, taken), (logging.INFO, taken)]
