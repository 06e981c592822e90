"""kube-apiserver restarted under admit with gang workloads present: every watch of admit's caches breaks
at once and comes back against a fresh watch cache. Nothing admit manages may be deleted or re-created on the way,
admit's memory must stay bounded, and it must go on working afterwards."""

from __future__ import annotations

import time

import pytest

from tests.real.support import gang_deployment, wait_for

PG = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups"
DEPLOY = "/apis/apps/v1/namespaces/{ns}/deployments"
WORKLOADS = 8


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def pod_groups(cp, ns: str) -> dict[str, dict]:
    return {pg["metadata"]["name"]: pg for pg in cp.rest("GET", PG.format(ns=ns))["items"]}


def admit_events(cp, ns: str) -> list[tuple[str, str]]:
    items = cp.rest("GET", f"/apis/events.k8s.io/v1/namespaces/{ns}/events")["items"]
    return [(e["reason"], e["regarding"]["name"]) for e in items
            if e.get("reportingController") == "admit.dev/podgroup-controller"]


@pytest.mark.needs("apiserver")
def test_a_kube_apiserver_restart_deletes_and_recreates_nothing_and_admit_goes_on(plane, ns):
    cp = plane.cp
    admit = plane.admit
    for i in range(WORKLOADS):
        cp.rest("POST", DEPLOY.format(ns=ns), body=gang_deployment(f"gang-{i}", replicas=1, min_member="auto"))

    def all_adopted():
        groups = pod_groups(cp, ns)
        return len(groups) == WORKLOADS and all(pg["metadata"].get("ownerReferences") for pg in groups.values())

    wait_for(all_adopted, timeout=60, what=f"{WORKLOADS} PodGroups adopted")
    before = {name: pg["metadata"]["uid"] for name, pg in pod_groups(cp, ns).items()}
    deployments = {d["metadata"]["name"]: d["metadata"]["uid"] for d in cp.rest("GET", DEPLOY.format(ns=ns))["items"]}
    rss_before = rss_mib(admit.popen.pid)
    events_before = admit_events(cp, ns)
    log_mark = len(admit.output())

    down = cp.restart("kube-apiserver", down=3.0)

    # admit's caches come back (a relist when the fresh watch cache refuses the old resourceVersions, or a resumed
    # watch), and the controller goes on: a new gang workload gets its PodGroup, adopted.
    cp.rest("POST", DEPLOY.format(ns=ns), body=gang_deployment("after", replicas=1, min_member="auto"))
    wait_for(lambda: (pod_groups(cp, ns).get("after") or {}).get("metadata", {}).get("ownerReferences"),
             timeout=60, what="the PodGroup of a Deployment created after the restart, adopted")
    time.sleep(6)  # longer than the orphan grace period admit runs with here (5 s): a wrong delete would show
    after = {name: pg["metadata"]["uid"] for name, pg in pod_groups(cp, ns).items()}
    assert {n: u for n, u in after.items() if n != "after"} == before, "a PodGroup was deleted or re-created"
    assert {d["metadata"]["name"]: d["metadata"]["uid"] for d in cp.rest("GET", DEPLOY.format(ns=ns))["items"]
            if d["metadata"]["name"] != "after"} == deployments
    new_events = [e for e in admit_events(cp, ns) if e not in events_before]
    assert not [e for e in new_events if e[0] in ("PodGroupDeleted", "PodGroupCreated") and e[1] != "after"], \
        new_events
    log = admit.output()[log_mark:]
    assert "deleted PodGroup" not in log and "Traceback" not in log, log[-3000:]
    assert "relisting" in log or "watching again" in log or "watch failed" in log, log[-3000:]
    assert admit.running()
    rss_after = rss_mib(admit.popen.pid)
    assert rss_after < 256, rss_after  # the chart's memory limit
    assert rss_after < rss_before * 1.25, (rss_before, rss_after)
    print(f"\nkube-apiserver down {down:.1f}s; admit RSS {rss_before:.1f} -> {rss_after:.1f} MiB; "
          f"{'relisted' if 'relisting' in log else 'resumed its watches'}")
