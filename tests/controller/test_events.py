"""Events the controller records (admit/controller/events.py) against the fake API: repeats become a series, a burst about
many objects of one kind folds into one combined Event after ten (client-go's EventCorrelator rule), and a burst
never overflows the queue."""

from __future__ import annotations

from typing import Any

import pytest

from admit.controller.events import COMBINED_PREFIX, EventRecorder
from admit.testing.fake_kube import FakeKubeAPI
from admit.kube.watchcache import KubeRaw


@pytest.fixture
async def recorder(fake):
    async with fake.api_client() as api_client:
        rec = EventRecorder(KubeRaw(api_client, timeout=2.0), "admit-0")
        yield rec
        await rec.stop()


def workload(name: str, namespace: str = "team") -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "resourceVersion": "7"}}


def stored_events(fake: FakeKubeAPI) -> list[dict[str, Any]]:
    return fake.objects("events", api_version="events.k8s.io/v1")


async def test_the_same_event_again_bumps_the_series_of_the_first(fake, recorder):
    recorder.record(workload("web"), "Warning", "PodGroupSyncFailed", "Reconcile", "cannot update")
    await recorder.flush()
    recorder.record(workload("web"), "Warning", "PodGroupSyncFailed", "Reconcile", "cannot update")
    await recorder.flush()
    [event] = stored_events(fake)
    assert event["series"]["count"] == 2 and event["regarding"]["name"] == "web"
    assert event["reportingController"] == "admit.dev/podgroup-controller" and event["reportingInstance"] == "admit-0"


async def test_repeats_of_an_event_still_waiting_to_be_written_cost_no_extra_write(fake, recorder):
    for _ in range(50):
        recorder.record(workload("web"), "Warning", "PodGroupSyncFailed", "Reconcile", "cannot update")
    await recorder.flush()
    [event] = stored_events(fake)
    assert event["series"]["count"] == 50
    assert recorder.written == 1 and len(fake.requests_for("events")) == 1


async def test_a_burst_about_many_objects_folds_into_one_combined_event_after_ten(fake, recorder):
    """20,000 PodGroups adopted by a new leader wrote 5,999 Events and dropped 14,001 (queue of 1,000).
    Scaled down: 3,000 adoptions, queue of 1,000."""
    for i in range(3000):
        recorder.record(workload(f"w{i:04}"), "Normal", "PodGroupAdopted", "Adopt",
                        f"PodGroup w{i:04} is now owned by this Deployment")
    recorder.record(workload("x", namespace="other"), "Normal", "PodGroupAdopted", "Adopt", "PodGroup x adopted")
    await recorder.flush(timeout=10)
    events = stored_events(fake)
    assert recorder.dropped == 0
    team = [e for e in events if e["metadata"]["namespace"] == "team"]
    singles = [e for e in team if not e["note"].startswith(COMBINED_PREFIX)]
    [combined] = [e for e in team if e["note"].startswith(COMBINED_PREFIX)]
    assert len(singles) == 10 and all("series" not in e for e in singles)
    assert combined["series"]["count"] == 2990 and combined["reason"] == "PodGroupAdopted"
    assert combined["note"] == COMBINED_PREFIX + "PodGroup w0010 is now owned by this Deployment"
    assert [e["regarding"]["name"] for e in events if e["metadata"]["namespace"] == "other"] == ["x"]
    assert len(fake.requests_for("events")) <= 14  # 10 + 1 created, and a few series patches at most
