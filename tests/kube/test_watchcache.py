"""The list+watch cache (admit/kube/watchcache.py) against the fake Kubernetes API over HTTP, with real watch streams.

Rules checked (Kubernetes docs "API Concepts", efficient detection of changes; client-go reflector): list then
watch from the list's resourceVersion; a watch that ends resumes from the last resourceVersion without a relist;
410 Gone relists and reports what changed meanwhile; 404/403 are logged once and retried slowly; errors back off,
so there is no busy loop; resync re-delivers cached objects without API calls.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

from admit.testing.fake_kube import FakeKubeAPI
from admit.kube.watchcache import KubeRaw, Resource, WatchCache
from tests.helpers import eventually

DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
FAST: dict[str, Any] = dict(backoff=(0.02, 0.2), slow_retry=0.2)




def deployment(name: str, replicas: int = 1, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "team", "labels": {"gang": "yes"} if labels is None else labels},
        "spec": {"replicas": replicas},
    }


@pytest.fixture
async def raw(fake):
    async with fake.api_client() as api_client:
        yield KubeRaw(api_client, timeout=2.0)


@pytest.fixture
async def caches():
    started: list[WatchCache] = []

    async def start(cache: WatchCache) -> WatchCache:
        started.append(cache)
        return await cache.start()

    yield start
    for cache in started:
        await cache.stop()


class LoopTurns:
    """Counts turns of the event loop while it runs (``async with``): stands for admissions served on the loop the
    cache runs on. ``ticks`` only grows when the code under test gives the loop back."""

    def __init__(self) -> None:
        self.ticks = 0
        self._stop = False
        self._task: asyncio.Task | None = None

    async def __aenter__(self) -> "LoopTurns":
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self._stop = True
        assert self._task is not None
        await self._task

    async def _run(self) -> None:
        while not self._stop:
            self.ticks += 1
            await asyncio.sleep(0)


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def __call__(self, event: str, obj: dict, old: dict | None) -> None:
        self.events.append((event, obj["metadata"]["name"]))


async def test_the_cache_lists_then_follows_the_watch_and_respects_the_label_selector(fake, raw, caches):
    fake.put(deployment("before"))
    fake.put(deployment("other", labels={"gang": "no"}))
    seen = Recorder()
    cache = await caches(WatchCache(raw, DEPLOYMENTS, label_selector="gang=yes", handlers=[seen], **FAST))
    assert await cache.wait_synced(2)
    assert [o["metadata"]["name"] for o in cache.items()] == ["before"]
    assert cache.get("team", "before")["kind"] == "Deployment"  # list items get apiVersion/kind back
    fake.put(deployment("after", replicas=2))
    await eventually(lambda: cache.get("team", "after") is not None)
    fake.put(deployment("after", replicas=3))
    await eventually(lambda: cache.get("team", "after")["spec"]["replicas"] == 3)
    fake.put(deployment("after", replicas=3, labels={"gang": "no"}))  # stops matching: seen as DELETED
    await eventually(lambda: cache.get("team", "after") is None)
    fake.delete_object("apps/v1", "deployments", "team", "before")
    await eventually(lambda: len(cache) == 0)
    assert seen.events == [("ADDED", "before"), ("ADDED", "after"), ("MODIFIED", "after"), ("DELETED", "after"),
                           ("DELETED", "before")]
    assert cache.lists == 1
    list_query = fake.requests_for("deployments", "list")[0].query
    assert list_query["labelSelector"] == "gang=yes" and "resourceVersion" not in list_query  # a consistent read
    watch_query = fake.requests_for("deployments", "watch")[0].query
    assert watch_query["resourceVersion"] == "1002"  # the list's resourceVersion, not an item's
    assert watch_query["allowWatchBookmarks"] == "true" and 300 <= int(watch_query["timeoutSeconds"]) <= 600


@pytest.mark.parametrize("abrupt", [False, True], ids=["clean end of stream", "connection aborted"])
async def test_a_dropped_watch_resumes_from_the_last_resource_version_without_relisting(fake, raw, caches, abrupt):
    seen = Recorder()
    cache = await caches(WatchCache(raw, DEPLOYMENTS, handlers=[seen], **FAST))
    await cache.wait_synced(2)
    fake.put(deployment("a"))
    await eventually(lambda: cache.get("team", "a") is not None)
    last_rv = fake.resource_version
    fake.delay("watch", "deployments", 0.2, times=1)  # the reconnect arrives while more happens
    await fake.drop_watches(abrupt=abrupt)
    fake.put(deployment("b"))
    fake.delete_object("apps/v1", "deployments", "team", "a")
    await eventually(lambda: cache.get("team", "b") is not None and cache.get("team", "a") is None)
    assert cache.lists == 1
    rewatch = fake.requests_for("deployments", "watch")[-1]
    assert rewatch.query["resourceVersion"] == last_rv
    assert seen.events == [("ADDED", "a"), ("ADDED", "b"), ("DELETED", "a")]


async def test_a_410_gone_relists_and_reports_what_changed_while_the_watch_was_away(fake, raw, caches, caplog):
    for name in ("stays", "changes", "goes"):
        fake.put(deployment(name))
    seen = Recorder()
    cache = await caches(WatchCache(raw, DEPLOYMENTS, handlers=[seen], **FAST))
    await cache.wait_synced(2)
    fake.delay("watch", "deployments", 0.2, times=1)
    await fake.drop_watches()
    fake.put(deployment("changes", replicas=5))
    fake.delete_object("apps/v1", "deployments", "team", "goes")
    fake.put(deployment("new"))
    fake.compact()  # etcd compaction: the reconnect's resourceVersion is now too old
    with caplog.at_level(logging.INFO, "admit.watchcache"):
        await eventually(lambda: cache.lists == 2 and cache.get("team", "new") is not None)
    assert sorted(o["metadata"]["name"] for o in cache.items()) == ["changes", "new", "stays"]
    assert cache.get("team", "changes")["spec"]["replicas"] == 5
    # The store is replaced before the handlers run, and the list may yield between them: wait for the last one.
    await eventually(lambda: sorted(seen.events[3:]) == [("ADDED", "new"), ("DELETED", "goes"),
                                                         ("MODIFIED", "changes")])
    assert any("watch expired" in r.getMessage() and "relisting" in r.getMessage() for r in caplog.records)
    fake.put(deployment("later"))  # and it watches again from the new list
    await eventually(lambda: cache.get("team", "later") is not None)


async def test_a_resource_that_is_not_served_is_logged_once_and_retried_slowly(fake, raw, caches, caplog):
    widgets = Resource("example.com", "v1", "widgets", "Widget")  # no such CRD: the server answers 404
    with caplog.at_level(logging.INFO, "admit.watchcache"):
        cache = await caches(WatchCache(raw, widgets, **FAST))
        assert await cache.wait_attempted(2)
        await asyncio.sleep(0.7)
    assert not cache.synced and cache.absent
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert "widgets.example.com/v1 not served (CRD not installed" in lines[0] and "retrying every 0.2s" in lines[0]
    attempts = [r for r in fake.requests if r.path.endswith("/widgets")]
    assert 3 <= len(attempts) <= 5  # every slow_retry (0.2 s), not a busy loop


async def test_403_is_logged_once_and_the_cache_recovers_when_access_is_granted(fake, raw, caches, caplog):
    fake.put(deployment("a"))
    fake.forbid("deployments")
    with caplog.at_level(logging.INFO, "admit.watchcache"):
        cache = await caches(WatchCache(raw, DEPLOYMENTS, **FAST))
        await cache.wait_attempted(2)
        await asyncio.sleep(0.5)
        assert not cache.synced and cache.state == "forbidden"
        fake.allow("deployments")
        assert await cache.wait_synced(2)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "deployments.apps/v1 forbidden (RBAC does not grant list)" in lines[0]
    assert "listed 1 objects; watching again" in lines[1]
    assert cache.get("team", "a") is not None


async def test_a_403_after_a_successful_list_is_retried_with_backoff_as_after_an_api_server_restart(fake, raw,
                                                                                                      caches):
    """A kube-apiserver that has just restarted answers 403 until its RBAC informers have synced (seen on the real
    plane: admit's service account refused for about a second). A kind that was listed before must come back within
    the backoff, not after the slow retry meant for a resource that was never granted."""
    fake.put(deployment("a"))
    cache = await caches(WatchCache(raw, DEPLOYMENTS, backoff=(0.05, 0.1), slow_retry=30.0))
    assert await cache.wait_synced(2)
    fake.forbid("deployments")
    fake.compact()
    await fake.drop_watches()  # the watch ends, its resourceVersion is gone: the cache lists again and gets 403
    await eventually(lambda: cache.state == "forbidden")
    fake.put(deployment("b"))
    fake.allow("deployments")
    await eventually(lambda: cache.current and cache.get("team", "b") is not None, timeout=2)  # not after 30 s


async def test_server_errors_back_off_instead_of_spinning(fake, raw, caches):
    cache = await caches(WatchCache(raw, DEPLOYMENTS, backoff=(0.05, 0.2), watch_timeout=(0, 0)))
    await cache.wait_synced(2)
    # timeoutSeconds=0: the server ends every watch at once, with no event. Backoff 0.05 s doubling to 0.2 s
    # (with jitter: half to all of it) allows at most about 6 watches in 0.6 s; a busy loop would make hundreds.
    await asyncio.sleep(0.6)
    watches = len(fake.requests_for("deployments", "watch"))
    assert 2 <= watches <= 10, watches
    fake.fail("watch", "deployments", 500, times=None)
    fake.clear_requests()
    await asyncio.sleep(0.6)
    failed = len(fake.requests_for("deployments", "watch"))
    assert 2 <= failed <= 10, failed


async def test_resync_redelivers_every_cached_object_without_api_calls(fake, raw, caches):
    fake.put(deployment("a"))
    fake.put(deployment("b"))
    seen = Recorder()
    cache = await caches(WatchCache(raw, DEPLOYMENTS, handlers=[seen], resync_period=0.2, **FAST))
    await cache.wait_synced(2)
    await eventually(lambda: fake.open_watches == 1)
    fake.clear_requests()
    await eventually(lambda: seen.events.count(("SYNC", "a")) >= 2 and seen.events.count(("SYNC", "b")) >= 2)
    assert fake.requests == []


async def test_list_pages_are_followed_with_continue_tokens(fake, raw, caches):
    for i in range(5):
        fake.put(deployment(f"d{i}"))
    cache = await caches(WatchCache(raw, DEPLOYMENTS, page_size=2, **FAST))
    await cache.wait_synced(2)
    assert len(cache) == 5
    pages = fake.requests_for("deployments", "list")
    assert [p.query.get("continue") is not None for p in pages] == [False, True, True]


async def test_a_failing_handler_is_logged_and_the_watch_goes_on(fake, raw, caches, caplog):
    def broken(event: str, obj: dict, old: dict | None) -> None:
        raise RuntimeError("boom")

    cache = await caches(WatchCache(raw, DEPLOYMENTS, handlers=[broken], **FAST))
    await cache.wait_synced(2)
    with caplog.at_level(logging.ERROR, "admit.watchcache"):
        fake.put(deployment("a"))
        await eventually(lambda: cache.get("team", "a") is not None)
        fake.put(deployment("b"))
        await eventually(lambda: cache.get("team", "b") is not None)
    assert sum("handler for deployments.apps/v1 ADDED failed" in r.getMessage() for r in caplog.records) == 2


async def test_stop_closes_the_watch_stream(fake, raw):
    cache = await WatchCache(raw, DEPLOYMENTS, **FAST).start()
    await cache.wait_synced(2)
    await eventually(lambda: fake.open_watches == 1)
    await cache.stop()
    await eventually(lambda: fake.open_watches == 0)
    await cache.stop()  # idempotent


async def test_a_watch_silent_for_two_bookmark_periods_is_opened_again_and_catches_up(fake, raw, caches, caplog):
    """A half-open stream (a partitioned node): the connection stays up, nothing arrives, not even the bookmark
    kube-apiserver sends every minute. idle_timeout scaled down from 130 s to 0.4 s."""
    seen = Recorder()
    cache = await caches(WatchCache(raw, DEPLOYMENTS, handlers=[seen], idle_timeout=0.4, **FAST))
    await cache.wait_synced(2)
    await eventually(lambda: fake.open_watches == 1)
    assert fake.hold_watches("deployments") == 1
    fake.put(deployment("during-partition"))
    with caplog.at_level(logging.WARNING, "admit.watchcache"):
        waited = await eventually(lambda: cache.get("team", "during-partition") is not None, timeout=3)
    assert 0.3 < waited < 1.5
    assert cache.idle_restarts == 1 and cache.lists == 1  # watched again from its resourceVersion: no relist
    assert seen.events == [("ADDED", "during-partition")]
    assert any("no event or bookmark for 0.4s" in r.getMessage() for r in caplog.records)


async def test_bookmarks_keep_a_quiet_watch_alive(raw, caches):
    async with FakeKubeAPI(bookmark_interval=0.1) as fake:
        async with fake.api_client() as api_client:
            cache = await caches(WatchCache(KubeRaw(api_client, timeout=2.0), DEPLOYMENTS, idle_timeout=0.4, **FAST))
            await cache.wait_synced(2)
            await asyncio.sleep(1.0)
            assert cache.idle_restarts == 0 and cache.watches == 1


async def test_a_404_on_a_relist_keeps_the_cached_objects_and_the_cache_is_no_longer_current(fake, raw, caches,
                                                                                           caplog):
    """During a kube-apiserver restart (or an aggregated API outage) a served resource can answer 404 for a moment;
    it must not look as if every object was deleted."""
    fake.put(deployment("a"))
    fake.put(deployment("b"))
    seen = Recorder()
    cache = await caches(WatchCache(raw, DEPLOYMENTS, handlers=[seen], **FAST))
    await cache.wait_synced(2)
    assert cache.current
    fake.fail("list", "deployments", 404, times=3)
    fake.hold_watches("deployments")
    fake.put(deployment("c"))  # moves the resourceVersion past the watch's (the watch does not see it)
    fake.compact()
    with caplog.at_level(logging.INFO, "admit.watchcache"):
        await fake.drop_watches()
        await eventually(lambda: cache.state == "not served")
    assert len(cache) == 2 and not cache.current and not cache.absent
    assert [e for e in seen.events if e[0] == "DELETED"] == []
    assert any("keeping the 2 cached objects" in r.getMessage() for r in caplog.records)
    await eventually(lambda: cache.current, timeout=3)  # the kind is served again
    assert len(cache) == 3 and [e for e in seen.events if e[0] == "DELETED"] == []


async def test_the_cache_keeps_only_the_transformed_record_and_a_relist_reuses_unchanged_ones(fake, raw, caches):
    for name in ("same", "changes"):
        fake.put(deployment(name))

    def slim(obj: dict) -> dict:
        meta = obj["metadata"]
        return {"metadata": {k: meta[k] for k in ("name", "namespace", "resourceVersion")},
                "replicas": obj["spec"]["replicas"]}

    seen = Recorder()
    cache = await caches(WatchCache(raw, DEPLOYMENTS, handlers=[seen], transform=slim, **FAST))
    await cache.wait_synced(2)
    same = cache.get("team", "same")
    assert set(same) == {"metadata", "replicas"}
    fake.put(deployment("changes", replicas=4))
    await eventually(lambda: cache.get("team", "changes")["replicas"] == 4)
    fake.hold_watches("deployments")  # the watch misses the next update; the relist finds it
    fake.put(deployment("changes", replicas=6))
    fake.compact()
    await fake.drop_watches()
    await eventually(lambda: cache.lists == 2)
    assert cache.get("team", "same") is same  # not re-made: a relist allocates only for what changed
    assert cache.get("team", "changes")["replicas"] == 6
    assert seen.events[-1] == ("MODIFIED", "changes") and ("MODIFIED", "same") not in seen.events


async def test_handler_calls_after_a_large_list_give_the_event_loop_back(fake, raw, caches):
    for i in range(600):
        fake.put(deployment(f"d{i:04}"))
    turns = LoopTurns()
    seen_at: list[int] = []

    def slow_handler(event: str, obj: dict, old: dict | None) -> None:
        seen_at.append(turns.ticks)
        end = time.perf_counter() + 0.0001  # 0.1 ms of work per object: 60 ms for the whole list
        while time.perf_counter() < end:
            pass

    async with turns:
        cache = await caches(WatchCache(raw, DEPLOYMENTS, handlers=[slow_handler], **FAST))
        await cache.wait_synced(3)
    assert len(seen_at) == 600
    assert len(set(seen_at)) >= 5  # other work ran between handler calls, several times


async def test_a_watch_loop_that_fails_unexpectedly_is_logged_reported_and_restarted(fake, raw, caches, caplog):
    fake.put(deployment("a"))
    calls = 0

    def transform(obj: dict) -> dict:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise KeyError("a bug")
        return obj

    states: list[str] = []
    with caplog.at_level(logging.ERROR, "admit.watchcache"):
        cache = WatchCache(raw, DEPLOYMENTS, transform=transform, backoff=(0.3, 0.3), slow_retry=0.2)
        await caches(cache)
        await eventually(lambda: cache.crashed)
        states.append(cache.state)
        await eventually(lambda: cache.current, timeout=3)
    assert states == ["crashed"] and cache.crashes == 1 and cache.get("team", "a") is not None
    assert any("deployments.apps/v1: watch loop failed (KeyError); restarting in" in r.getMessage()
               for r in caplog.records)


async def test_every_list_page_gives_the_event_loop_back_before_its_objects_are_turned_into_records(fake, raw,
                                                                                                    caches):
    """A page of 100 stored Deployments is about 0.5 MB parsed in one step; walking it into records in the
    same step held admissions for 15 to 20 ms per page (asyncio debug mode, 20,000 workloads)."""
    for i in range(300):
        fake.put(deployment(f"d{i:04}"))
    turns = LoopTurns()
    parsed_at: list[int] = []
    request = raw.request

    async def slow_parse(*args: Any, **kwargs: Any) -> Any:
        doc = await request(*args, **kwargs)
        end = time.perf_counter() + 0.006  # a parse longer than one of the Pacer's 5 ms slices
        while time.perf_counter() < end:
            pass
        parsed_at.append(turns.ticks)
        return doc

    raw.request = slow_parse
    walked_at: list[int] = []

    def transform(obj: dict) -> dict:
        walked_at.append(turns.ticks)
        return obj

    async with turns:
        cache = await caches(WatchCache(raw, DEPLOYMENTS, transform=transform, page_size=100, **FAST))
        await cache.wait_synced(3)
    assert len(parsed_at) == 3 and len(walked_at) == 300
    assert [walked_at[100 * page] > parsed_at[page] for page in range(3)] == [True, True, True]


async def test_kube_raw_maps_api_errors_and_decodes_answers_itself(fake, raw):
    """KubeRaw reads the body raw (decoded with orjson when installed) and still raises what kubernetes-asyncio's
    client raised: KubeError with the status, the Status reason and message, AlreadyExists for a 409 on create."""
    from admit.kube.client import AlreadyExists, KubeError

    path = DEPLOYMENTS.path("team")
    created = await raw.request("POST", path, body=deployment("web"))
    assert created["metadata"]["name"] == "web" and created["metadata"]["resourceVersion"]
    assert raw.writes["POST deployments"] == 1
    listed = await raw.request("GET", path, query=[("limit", "10")])
    assert [d["metadata"]["name"] for d in listed["items"]] == ["web"]
    with pytest.raises(AlreadyExists) as exists:
        await raw.request("POST", path, body=deployment("web"))
    assert exists.value.status == 409 and exists.value.reason == "AlreadyExists"
    with pytest.raises(KubeError) as missing:
        await raw.request("GET", DEPLOYMENTS.path("team", "nope"))
    assert missing.value.status == 404 and missing.value.reason == "NotFound"
    assert missing.value.message.startswith(f"GET {DEPLOYMENTS.path('team', 'nope')}: 404 NotFound: ")
    assert raw.writes["POST deployments"] == 1  # failed writes are not counted


async def test_kube_raw_refuses_a_successful_answer_that_is_not_json():
    from aiohttp import web
    from aiohttp.test_utils import TestServer
    from kubernetes_asyncio import client

    from admit.kube.client import KubeError

    app = web.Application()
    async def login_page(request: web.Request) -> web.Response:  # a proxy in the way, answering 200 with HTML
        return web.Response(text="<html>proxy login</html>")

    app.router.add_get("/api/v1/namespaces", login_page)
    async with TestServer(app, host="127.0.0.1") as server:
        api_client = client.ApiClient(client.Configuration(host=str(server.make_url("")).rstrip("/")))
        try:
            with pytest.raises(KubeError) as bad:
                await KubeRaw(api_client, timeout=2.0).request("GET", "/api/v1/namespaces")
        finally:
            await api_client.close()
    assert bad.value.reason == "BadResponse" and "proxy login" in bad.value.message
