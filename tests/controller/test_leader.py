"""Lease-based leader election (admit/controller/leader.py) against the fake Kubernetes API over HTTP.

Rules checked (client-go ``tools/leaderelection``; Kubernetes API reference "Lease v1"): a missing Lease is
created; a held Lease is taken over only after ``lease_duration`` without an observed renewal, or at once when
released; writes carry the resourceVersion read (409 is a lost race); a leader that cannot renew within
``renew_deadline`` stops leading; ``leaseTransitions`` counts holder changes; MicroTime has six fractional digits.
Durations are scaled down (lease 0.6 s, renew deadline 0.4 s, retry 0.1 s) to keep the tests fast.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Any

import pytest

from admit.controller.leader import LeaderElector, default_identity, micro_time
from admit.testing.fake_kube import FakeKubeAPI
from admit.kube.watchcache import KubeRaw
from tests.helpers import eventually

TIMES: dict[str, float] = dict(lease_duration=0.6, renew_deadline=0.4, retry_period=0.1)
MICRO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")




def lease_of(fake: FakeKubeAPI) -> dict[str, Any]:
    lease = fake.get("coordination.k8s.io/v1", "leases", "admit", "admit-controller")
    assert lease is not None
    return lease["spec"]


@pytest.fixture
async def candidates(fake):
    """Factory: ``await candidates("a")`` starts a candidate on its own ApiClient; all are stopped at the end."""
    made: list[tuple[LeaderElector, Any]] = []

    async def make(identity: str, **kw: Any) -> LeaderElector:
        api_client = fake.api_client()
        elector = LeaderElector(KubeRaw(api_client, timeout=1.0), "admit", "admit-controller", identity,
                                **{**TIMES, **kw})
        made.append((elector, api_client))
        return await elector.start()

    yield make
    for elector, api_client in made:
        await elector.stop()
        await api_client.close()


def test_micro_time_has_exactly_six_fractional_digits_and_a_z():
    assert MICRO.match(micro_time())


def test_the_identity_is_the_pod_name_with_a_random_suffix(monkeypatch):
    monkeypatch.setenv("POD_NAME", "admit-7d4b9")
    a, b = default_identity(), default_identity()
    assert a.startswith("admit-7d4b9_") and b.startswith("admit-7d4b9_") and a != b


def test_durations_must_follow_client_go_ordering():
    with pytest.raises(ValueError, match="lease_duration > renew_deadline > retry_period"):
        LeaderElector(None, "ns", "l", "me", lease_duration=10, renew_deadline=10, retry_period=2)  # type: ignore[arg-type]


async def test_a_lone_candidate_creates_the_lease_and_keeps_renewing_it(fake, candidates):
    started: list[str] = []
    a = await candidates("a", on_started_leading=lambda: started.append("a"))
    await eventually(a.is_leader)
    spec = lease_of(fake)
    assert spec["holderIdentity"] == "a" and spec["leaseTransitions"] == 0 and spec["leaseDurationSeconds"] == 1
    assert MICRO.match(spec["acquireTime"]) and MICRO.match(spec["renewTime"])
    first_renew = spec["renewTime"]
    await eventually(lambda: lease_of(fake)["renewTime"] != first_renew)  # renewed every retry period
    assert lease_of(fake)["acquireTime"] == spec["acquireTime"]
    assert started == ["a"] and a.terms == 1
    renew = [r for r in fake.requests_for("leases", "update")]
    assert all(r.body["metadata"]["resourceVersion"] for r in renew)  # optimistic concurrency on every write


async def test_of_two_candidates_exactly_one_leads_and_a_release_hands_over_at_once(fake, candidates):
    a = await candidates("a")
    b = await candidates("b")
    await eventually(lambda: a.is_leader() or b.is_leader())
    for _ in range(40):  # 0.4 s of samples: never two leaders
        assert a.is_leader() + b.is_leader() == 1
        await asyncio.sleep(0.01)
    leader, follower = (a, b) if a.is_leader() else (b, a)
    assert follower.holder == leader.identity
    await leader.stop()  # graceful: empty holder
    took = await eventually(follower.is_leader)
    assert took < TIMES["lease_duration"]  # released: no need to wait a lease duration
    spec = lease_of(fake)
    assert spec["holderIdentity"] == follower.identity and spec["leaseTransitions"] == 1


async def test_a_crashed_leader_is_replaced_after_the_lease_duration_and_not_before(fake, candidates):
    a = await candidates("a")
    await eventually(a.is_leader)
    b = await candidates("b")
    await asyncio.sleep(0.2)
    assert not b.is_leader()
    await a.stop(release=False)  # a crash: no release, renewals just stop
    stopped_at = time.monotonic()
    await eventually(b.is_leader)
    waited = time.monotonic() - stopped_at
    # b takes over once it has seen no change for the record's leaseDurationSeconds (client-go isLeaseValid; a's
    # 0.6 s is written as the integer 1): at least 1 s minus the part of the last renew period already seen unchanged
    # (< retry period 0.1 s), plus at most one retry period.
    assert lease_of(fake)["leaseDurationSeconds"] == 1
    assert 1.0 - 0.15 <= waited <= 1.0 + 0.4, waited
    assert lease_of(fake)["holderIdentity"] == "b" and lease_of(fake)["leaseTransitions"] == 1


async def test_a_lease_held_by_an_unknown_identity_is_waited_for_logged_once_then_taken_over(fake, candidates, caplog):
    fake.put({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
              "metadata": {"name": "admit-controller", "namespace": "admit"},
              "spec": {"holderIdentity": "ghost", "leaseDurationSeconds": 1, "renewTime": micro_time(),
                       "acquireTime": micro_time(), "leaseTransitions": 4}})

    async def ghost_renews() -> None:
        while True:
            await asyncio.sleep(0.1)
            lease = fake.get("coordination.k8s.io/v1", "leases", "admit", "admit-controller")
            fake.put(dict(lease, spec=dict(lease["spec"], renewTime=micro_time())))

    renewer = asyncio.create_task(ghost_renews())
    with caplog.at_level(logging.INFO, "admit.leader"):
        a = await candidates("a")
        await asyncio.sleep(1.5)  # longer than the lease duration: the ghost keeps renewing
        assert not a.is_leader() and a.holder == "ghost"
        renewer.cancel()
        waited = await eventually(a.is_leader)
    assert waited >= 1.0 - 0.15  # the ghost's leaseDurationSeconds, not a's own 0.6 s
    messages = [r.getMessage() for r in caplog.records]
    assert sum("held by 'ghost'" in m for m in messages) == 1, messages
    assert sum("holder 'ghost' has not renewed for 1s; a takes over" in m for m in messages) == 1, messages
    assert lease_of(fake)["leaseTransitions"] == 5
    assert fake.requests_for("leases", "update")  # the ghost's Lease was updated, not replaced


async def test_a_leader_that_cannot_renew_stops_leading_within_the_renew_deadline(fake, candidates):
    stopped = asyncio.Event()
    a = await candidates("a", on_stopped_leading=stopped.set)
    await eventually(a.is_leader)
    fake.fail("update", "leases", 500, times=None)
    failing_since = time.monotonic()
    await eventually(lambda: not a.is_leader())
    # is_leader() turns false once the last renewal is renew_deadline old, even before the loop gives up.
    assert time.monotonic() - failing_since <= TIMES["renew_deadline"] + 0.25
    await asyncio.wait_for(stopped.wait(), 2)
    fake.clear_faults()
    await eventually(a.is_leader)  # and campaigns again
    assert a.terms == 2


async def test_a_conflict_on_update_is_a_lost_race_not_a_crash(fake, candidates):
    fake.put({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
              "metadata": {"name": "admit-controller", "namespace": "admit"}, "spec": {"holderIdentity": ""}})
    fake.fail("update", "leases", 409, times=1)
    a = await candidates("a")
    await eventually(a.is_leader)
    statuses = [r.status for r in fake.requests_for("leases", "update")]
    assert statuses[:2] == [409, 200]


async def test_a_stopped_leader_writes_an_empty_holder_and_calls_its_stop_callback(fake, candidates):
    stopped: list[str] = []
    a = await candidates("a", on_stopped_leading=lambda: stopped.append("a"))
    await eventually(a.is_leader)
    await a.stop()
    assert lease_of(fake)["holderIdentity"] == "" and lease_of(fake)["leaseDurationSeconds"] == 1
    assert stopped == ["a"] and not a.is_leader()
    writes = len(fake.requests_for("leases", "update"))
    await asyncio.sleep(0.3)
    assert len(fake.requests_for("leases", "update")) == writes  # nothing more after stop
