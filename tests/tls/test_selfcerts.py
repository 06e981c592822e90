"""Self-managed certificates (admit/tls/selfcerts.py) against the fake Kubernetes API, with real TLS clients."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import logging
import ssl

import pytest
from cryptography import x509

from admit.tls import certs, selfcerts
from admit.tls.certs import CertificateError
from admit.tls.selfcerts import SelfManagedTLSProvider
from admit.testing.fake_kube import FakeKubeAPI
from tests.helpers import serve_tls as serve

NS = "gang-system"
SECRET = "admit-tls"
HOOK_NAMES = {"MutatingWebhookConfiguration": ["mutate.pods.gang.admit.dev", "mutate.workloads.gang.admit.dev"],
              "ValidatingWebhookConfiguration": ["validate.workloads.gang.admit.dev"]}
PLURAL = {"MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
          "ValidatingWebhookConfiguration": "validatingwebhookconfigurations"}
ADM = "admissionregistration.k8s.io/v1"


class FakeClock:
    def __init__(self, now: dt.datetime | None = None) -> None:
        self.now = now or dt.datetime.now(dt.timezone.utc)

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, **kw: float) -> None:
        self.now += dt.timedelta(**kw)


def webhook_config(kind: str, ca_bundle: str | None = None) -> dict:
    hooks = []
    for name in HOOK_NAMES[kind]:
        client_config = {"service": {"name": "admit", "namespace": NS, "path": "/mutate", "port": 443}}
        if ca_bundle is not None:
            client_config["caBundle"] = ca_bundle
        hooks.append({"name": name, "clientConfig": client_config, "admissionReviewVersions": ["v1"],
                      "sideEffects": "NoneOnDryRun", "failurePolicy": "Fail"})
    return {"apiVersion": ADM, "kind": kind, "metadata": {"name": "admit"}, "webhooks": hooks}


@pytest.fixture
async def api():
    async with FakeKubeAPI() as fake:
        for kind in HOOK_NAMES:
            fake.put(webhook_config(kind))
        yield fake


@pytest.fixture
async def client(api: FakeKubeAPI):
    async with api.api_client() as c:
        yield c


def provider(client, clock, **kw) -> SelfManagedTLSProvider:
    kw.setdefault("dns_names", ["localhost"])
    kw.setdefault("ip_addresses", ["127.0.0.1"])
    kw.setdefault("recheck_interval", 3600)
    return SelfManagedTLSProvider(client, NS, SECRET, "admit", "admit", "admit", clock=clock, **kw)


def held_once(read, barrier: asyncio.Barrier):
    """``read`` (an ``async (path) -> object``) whose first call, once answered, waits at ``barrier``: two replicas
    given the same barrier both read before either writes, however loaded the machine is."""
    calls = 0

    async def held(path):
        nonlocal calls
        calls += 1
        obj = await read(path)
        if calls == 1:
            await barrier.wait()
        return obj
    return held


def secret_data(api: FakeKubeAPI) -> dict[str, bytes]:
    obj = api.get("v1", "secrets", NS, SECRET)
    return {k: base64.b64decode(v) for k, v in obj["data"].items()}


def put_secret_data(api: FakeKubeAPI, data: dict[str, bytes], **extra) -> None:
    obj = api.get("v1", "secrets", NS, SECRET)
    obj["data"] = {k: base64.b64encode(v).decode() for k, v in data.items()}
    obj.update(extra)
    api.put(obj)


def bundles(api: FakeKubeAPI) -> list[bytes]:
    out = []
    for kind in HOOK_NAMES:
        for hook in api.get(ADM, kind, None, "admit")["webhooks"]:
            out.append(base64.b64decode(hook["clientConfig"].get("caBundle", "")))
    return out


def bundle_serials(api: FakeKubeAPI) -> set[frozenset[int]]:
    return {frozenset(c.serial_number for c in certs.load_certificates(b)) if b else frozenset() for b in bundles(api)}


def writes(api: FakeKubeAPI) -> list[tuple[str, str, int | None]]:
    return [(r.method, r.resource, r.status) for r in api.requests if r.method != "GET"]




def apiserver_context(api: FakeKubeAPI) -> ssl.SSLContext:
    """What kube-apiserver trusts: the caBundle of the (first) webhook entry."""
    return ssl.create_default_context(cadata=bundles(api)[0].decode())


async def peer_serial(port: int, ctx: ssl.SSLContext, host: str = "admit.gang-system.svc") -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname=host)
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        return x509.load_der_x509_certificate(der).serial_number
    finally:
        writer.close()
        await writer.wait_closed()


async def http_get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    writer.write(b"GET / HTTP/1.1\r\nHost: admit\r\n\r\n")
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    return head.split(b"\r\n")[0] + b" " + await reader.readexactly(2)


# ------------------------------------------------------------------------------------------------------------------


async def test_first_start_creates_one_tls_secret_and_writes_the_ca_into_every_webhook_entry_with_exact_patches(
    api: FakeKubeAPI, client
) -> None:
    p = provider(client, FakeClock())
    await p.start()
    try:
        assert [(r.method, r.resource, r.name, r.status) for r in api.requests] == [
            ("GET", "secrets", SECRET, 404),
            ("POST", "secrets", None, 201),
            ("GET", "mutatingwebhookconfigurations", "admit", 200),
            ("PATCH", "mutatingwebhookconfigurations", "admit", 200),
            ("GET", "validatingwebhookconfigurations", "admit", 200),
            ("PATCH", "validatingwebhookconfigurations", "admit", 200),
        ]
        secret = api.get("v1", "secrets", NS, SECRET)
        assert secret["type"] == "kubernetes.io/tls"
        assert secret["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "admit"}
        data = secret_data(api)
        assert sorted(data) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
        ca = certs.load_pair(data["ca.crt"], data["ca.key"], "ca.crt", "ca.key")
        leaf = certs.load_pair(data["tls.crt"], data["tls.key"])
        assert certs.is_signed_by(leaf.cert, ca.cert)
        assert set(certs.subject_alt_names(leaf.cert)) >= {"admit.gang-system.svc", "localhost", "127.0.0.1",
                                                           "admit.gang-system.svc.cluster.local"}

        b64 = base64.b64encode(data["ca.crt"]).decode()
        mutating, validating = api.requests[3], api.requests[5]
        assert mutating.content_type == "application/json-patch+json"
        assert mutating.body == [
            {"op": "test", "path": "/webhooks/0/name", "value": "mutate.pods.gang.admit.dev"},
            {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": b64},
            {"op": "test", "path": "/webhooks/1/name", "value": "mutate.workloads.gang.admit.dev"},
            {"op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": b64},
        ]
        assert validating.body == [
            {"op": "test", "path": "/webhooks/0/name", "value": "validate.workloads.gang.admit.dev"},
            {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": b64},
        ]
        assert p.ready() and p.reason() == ""
        assert p.pair.cert.serial_number == leaf.cert.serial_number
    finally:
        await p.stop()


async def test_a_check_with_nothing_to_change_only_reads(api: FakeKubeAPI, client) -> None:
    p = provider(client, FakeClock())
    await p.reconcile()
    api.clear_requests()
    result = await p.reconcile()
    assert writes(api) == []
    assert [r.method for r in api.requests] == ["GET", "GET", "GET"]
    assert not (result.written or result.created or result.patched or result.installed)


async def test_a_helm_upgrade_that_resets_one_ca_bundle_is_healed_by_patching_only_that_entry(
    api: FakeKubeAPI, client
) -> None:
    p = provider(client, FakeClock())
    await p.reconcile()
    b64 = base64.b64encode(secret_data(api)["ca.crt"]).decode()
    reset = webhook_config("MutatingWebhookConfiguration", ca_bundle=b64)
    del reset["webhooks"][1]["clientConfig"]["caBundle"]  # the chart leaves caBundle out
    api.put(reset)
    api.clear_requests()

    result = await p.reconcile()
    assert result.patched == ["MutatingWebhookConfiguration/admit"]
    (patch,) = api.requests_for(method="PATCH")
    assert patch.resource == "mutatingwebhookconfigurations"
    assert patch.body == [
        {"op": "test", "path": "/webhooks/1/name", "value": "mutate.workloads.gang.admit.dev"},
        {"op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": b64},
    ]
    assert bundle_serials(api) == {frozenset({certs.load_certificates(secret_data(api)["ca.crt"])[0].serial_number})}


async def test_a_ca_bundle_with_the_same_certificates_in_another_order_is_left_alone(api: FakeKubeAPI, client) -> None:
    p = provider(client, FakeClock())
    await p.reconcile()
    other = certs.generate_ca()
    mine = secret_data(api)["ca.crt"]
    data = secret_data(api)
    data["ca-previous.crt"] = other.cert_pem
    put_secret_data(api, data)
    await p.reconcile()  # bundle now {mine, other} in canonical order
    reordered = base64.b64encode(other.cert_pem + mine).decode() if bundles(api)[0].startswith(mine) else \
        base64.b64encode(mine + other.cert_pem).decode()
    for kind in HOOK_NAMES:
        api.put(webhook_config(kind, ca_bundle=reordered))
    api.clear_requests()
    await p.reconcile()
    assert api.requests_for(method="PATCH") == []


async def test_two_replicas_starting_at_once_converge_on_one_secret_and_one_ca(api: FakeKubeAPI, client) -> None:
    clock = FakeClock()
    a, b = provider(client, clock), provider(client, clock)
    api.delay("GET", "secrets", 0.05, times=2)  # both read "not found" before either creates
    await asyncio.gather(a.start(), b.start())
    try:
        posts = [r.status for r in api.requests_for("secrets", "POST")]
        assert sorted(posts) == [201, 409]
        assert len(api.objects("secrets", NS)) == 1
        assert a.pair.fingerprint == b.pair.fingerprint
        ca_serial = certs.load_certificates(secret_data(api)["ca.crt"])[0].serial_number
        assert bundle_serials(api) == {frozenset({ca_serial})}
        assert a.ready() and b.ready()
    finally:
        await a.stop()
        await b.stop()


async def test_two_replicas_rotating_at_once_do_not_overwrite_each_other(api: FakeKubeAPI, client) -> None:
    clock = FakeClock()
    a, b = provider(client, clock), provider(client, clock)
    await a.reconcile()
    await b.reconcile()
    clock.advance(days=250)  # past two thirds of the 365-day leaf
    api.clear_requests()
    both_read = asyncio.Barrier(2)  # each replica's first read waits for the other's: both hold one resourceVersion
    for replica in (a, b):
        replica.api.get = held_once(replica.api.get, both_read)
    ra, rb = await asyncio.wait_for(asyncio.gather(a.reconcile(), b.reconcile()), 10)
    puts = [r.status for r in api.requests_for("secrets", "PUT")]
    assert sorted(puts) == [200, 409]
    assert ra.conflicts + rb.conflicts == 1 and ra.written != rb.written
    assert a.pair.fingerprint == b.pair.fingerprint == certs.load_pair(
        secret_data(api)["tls.crt"], secret_data(api)["tls.key"]).fingerprint
    assert not certs.needs_rotation(a.pair.cert, clock)


async def test_the_serving_certificate_rotates_before_expiry_and_a_real_client_sees_it_without_a_restart(
    api: FakeKubeAPI, client
) -> None:
    clock = FakeClock(dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=300))
    p = provider(client, clock)
    await p.start()
    runner, port = await serve(p)
    try:
        first = p.pair.cert.serial_number
        ctx = apiserver_context(api)
        assert await peer_serial(port, ctx) == first
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="admit.gang-system.svc")
        assert await http_get(reader, writer) == b"HTTP/1.1 200 OK ok"

        clock.now = dt.datetime.now(dt.timezone.utc)  # 300 days later: less than a third of the year is left
        result = await p.reconcile()
        assert result.written and result.installed and result.patched == []  # same CA: caBundle untouched
        assert any("tls.crt is due for rotation" in a for a in result.actions)

        assert await http_get(reader, writer) == b"HTTP/1.1 200 OK ok"  # the open connection keeps working
        writer.close()
        await writer.wait_closed()
        second = await peer_serial(port, apiserver_context(api))
        assert second != first and second == p.pair.cert.serial_number
        assert certs.rotation_due_at(p.pair.cert) > clock.now
    finally:
        await p.stop()
        await runner.cleanup()


async def test_the_ca_rotates_with_an_overlap_so_the_apiserver_trusts_every_served_leaf_at_every_step(
    api: FakeKubeAPI, client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "admit")
    real_now = dt.datetime.now(dt.timezone.utc)
    clock = FakeClock(real_now - dt.timedelta(days=365 * 7))
    a = provider(client, clock, policy=selfcerts.Policy(ca_stage_seconds=60, ca_overlap_seconds=120))
    b = provider(client, clock, policy=selfcerts.Policy(ca_stage_seconds=60, ca_overlap_seconds=120))  # a second replica, checks later
    await a.reconcile()
    await b.reconcile()
    old_ca = certs.load_certificates(secret_data(api)["ca.crt"])[0]
    runner_a, port_a = await serve(a)
    runner_b, port_b = await serve(b)
    try:
        # 7 years on: less than a third of the CA's 10 years is left. Stage: the new CA joins caBundle first.
        clock.now = real_now
        result = await a.reconcile()
        data = secret_data(api)
        assert sorted(data) == ["ca-next.crt", "ca-next.key", "ca.crt", "ca.key", "tls.crt", "tls.key"]
        new_ca = certs.load_certificates(data["ca-next.crt"])[0]
        assert bundle_serials(api) == {frozenset({old_ca.serial_number, new_ca.serial_number})}
        assert certs.is_signed_by(a.pair.cert, old_ca)  # leaves still come from the old CA
        assert api.get("v1", "secrets", NS, SECRET)["metadata"]["annotations"][selfcerts.STAGED_AT]
        await b.reconcile()
        for port in (port_a, port_b):
            await peer_serial(port, apiserver_context(api))

        # Too early to switch: nothing changes.
        clock.advance(seconds=30)
        api.clear_requests()
        await a.reconcile()
        assert writes(api) == []

        # Switch: the new CA issues the leaf, the old CA stays in caBundle; replica b still serves an old leaf.
        clock.advance(seconds=31)
        result = await a.reconcile()
        assert any("switched to the new CA" in x for x in result.actions) and result.patched == []
        data = secret_data(api)
        assert sorted(data) == ["ca-previous.crt", "ca.crt", "ca.key", "tls.crt", "tls.key"]
        assert certs.load_certificates(data["ca.crt"])[0].serial_number == new_ca.serial_number
        assert certs.is_signed_by(a.pair.cert, new_ca) and certs.is_signed_by(b.pair.cert, old_ca)
        assert bundle_serials(api) == {frozenset({old_ca.serial_number, new_ca.serial_number})}
        assert await peer_serial(port_a, apiserver_context(api)) == a.pair.cert.serial_number
        assert await peer_serial(port_b, apiserver_context(api)) == b.pair.cert.serial_number  # still trusted
        await b.reconcile()
        assert b.pair.fingerprint == a.pair.fingerprint

        # Retire: after the overlap only the new CA is left.
        clock.advance(seconds=121)
        result = await a.reconcile()
        assert sorted(secret_data(api)) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
        assert bundle_serials(api) == {frozenset({new_ca.serial_number})}
        for port in (port_a, port_b):
            assert await peer_serial(port, apiserver_context(api)) == a.pair.cert.serial_number
        assert "PRIVATE KEY" not in caplog.text
    finally:
        await runner_a.cleanup()
        await runner_b.cleanup()


async def test_the_switch_to_a_new_ca_waits_until_every_webhook_entry_trusts_it(api: FakeKubeAPI, client) -> None:
    clock = FakeClock(dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=365 * 7))
    p = provider(client, clock, policy=selfcerts.Policy(ca_stage_seconds=60, ca_overlap_seconds=36000))
    await p.reconcile()
    old_bundle = bundles(api)[0]
    clock.now = dt.datetime.now(dt.timezone.utc)
    await p.reconcile()  # staged
    # a helm upgrade puts the old bundle back and patches fail for a while
    api.put(webhook_config("ValidatingWebhookConfiguration", ca_bundle=base64.b64encode(old_bundle).decode()))
    api.fail("patch", "validatingwebhookconfigurations", 500, times=None)
    clock.advance(seconds=120)
    with pytest.raises(Exception):
        await p.reconcile()
    assert "ca-next.crt" in secret_data(api)  # not switched
    assert not p.ready() and p.reason().startswith("caBundle could not be checked: PATCH ") and ": 500 " in p.reason()
    api.clear_faults()
    await p.reconcile()  # heals the bundle, still not switched in this check
    assert "ca-next.crt" in secret_data(api) and p.ready()
    await p.reconcile()
    assert "ca-previous.crt" in secret_data(api)


def _leaf_from_other_ca() -> certs.CertifiedKey:
    return certs.generate_serving_certificate(certs.generate_ca(), "admit", NS)


@pytest.mark.parametrize(
    ("damage", "error", "new_ca"),
    [
        ("corrupt tls.crt", "tls.crt is not valid PEM", False),
        ("half-written tls.key", "tls.key cannot be parsed", False),
        ("tls.key of another certificate", "tls.key does not match tls.crt", False),
        ("leaf not signed by the CA", "is not signed by ca.crt", False),
        ("tls pair only", "ca.crt and ca.key are missing", True),
        ("ca.key missing", "ca.key is empty", True),
        ("ca.crt is a leaf", "ca.crt is not a CA certificate", True),
        ("not base64", "tls.key is not valid base64", False),
    ],
)
async def test_bad_secret_content_is_detected_logged_in_one_line_and_regenerated(
    api: FakeKubeAPI, client, caplog: pytest.LogCaptureFixture, damage: str, error: str, new_ca: bool
) -> None:
    p = provider(client, FakeClock())
    await p.reconcile()
    data = secret_data(api)
    old_ca = certs.load_certificates(data["ca.crt"])[0]
    other = _leaf_from_other_ca()
    if damage == "corrupt tls.crt":
        data["tls.crt"] = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
    elif damage == "half-written tls.key":
        data["tls.key"] = data["tls.key"][:60]
    elif damage == "tls.key of another certificate":
        data["tls.key"] = other.key_pem
    elif damage == "leaf not signed by the CA":
        data["tls.crt"], data["tls.key"] = other.cert_pem, other.key_pem
    elif damage == "tls pair only":
        data = {"tls.crt": data["tls.crt"], "tls.key": data["tls.key"]}
    elif damage == "ca.key missing":
        del data["ca.key"]
    elif damage == "ca.crt is a leaf":
        data["ca.crt"], data["ca.key"] = other.cert_pem, other.key_pem
    put_secret_data(api, data)
    if damage == "not base64":
        obj = api.get("v1", "secrets", NS, SECRET)
        obj["data"]["tls.key"] = "%%% not base64 %%%"
        api.put(obj)

    caplog.set_level(logging.INFO, "admit")
    result = await p.reconcile()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"Secret {NS}/{SECRET}: ") and error in errors[0] and errors[0].endswith("; repaired")
    assert "PRIVATE KEY" not in caplog.text

    repaired = secret_data(api)
    material, problems = selfcerts.parse_secret(repaired)
    assert problems == [] and material.leaf is not None
    assert p.pair.fingerprint == material.leaf.fingerprint
    assert (material.ca.cert.serial_number != old_ca.serial_number) == new_ca
    if damage == "ca.key missing":  # the old CA still parses: it stays trusted for the overlap
        assert material.previous_ca[0].serial_number == old_ca.serial_number
    trusted = {c.serial_number for c in certs.load_certificates(bundles(api)[0])}
    assert material.ca.cert.serial_number in trusted and p.ready()
    assert result.written and result.problems

    caplog.clear()
    await p.reconcile()  # repaired for good: no further errors
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_foreign_keys_labels_and_annotations_of_the_secret_are_kept(api: FakeKubeAPI, client) -> None:
    p = provider(client, FakeClock())
    await p.reconcile()
    obj = api.get("v1", "secrets", NS, SECRET)
    obj["metadata"]["labels"]["team"] = "ml"
    obj["metadata"]["annotations"] = {"note": "keep me"}
    obj["data"]["extra"] = base64.b64encode(b"x").decode()
    del obj["data"]["tls.key"]
    api.put(obj)
    await p.reconcile()
    obj = api.get("v1", "secrets", NS, SECRET)
    assert obj["metadata"]["labels"]["team"] == "ml" and obj["metadata"]["annotations"] == {"note": "keep me"}
    assert obj["data"]["extra"] == base64.b64encode(b"x").decode() and "tls.key" in obj["data"]


async def test_a_changed_service_name_gets_a_certificate_for_the_new_name(api: FakeKubeAPI, client) -> None:
    await provider(client, FakeClock()).reconcile()
    p = SelfManagedTLSProvider(client, NS, SECRET, "gang-webhook", "admit", "admit", clock=FakeClock())
    result = await p.reconcile()
    assert any("does not cover gang-webhook" in a for a in result.actions)
    assert "gang-webhook.gang-system.svc" in certs.subject_alt_names(p.pair.cert)
    assert result.patched == []  # same CA


async def test_readiness_waits_for_the_webhook_configurations_to_exist(api: FakeKubeAPI, client) -> None:
    api.delete_object(ADM, "ValidatingWebhookConfiguration", None, "admit")
    p = provider(client, FakeClock(), recheck_interval=0.05)
    await p.start()
    try:
        assert p.pair is not None and not p.ready()
        assert p.reason() == "ValidatingWebhookConfiguration admit not found; caBundle not in place"
        api.put(webhook_config("ValidatingWebhookConfiguration"))  # helm creates it after the Deployment
        for _ in range(200):
            if p.ready():
                break
            await asyncio.sleep(0.01)
        assert p.ready() and p.reason() == ""
    finally:
        await p.stop()


async def test_an_empty_configuration_name_skips_that_configuration(api: FakeKubeAPI, client) -> None:
    p = SelfManagedTLSProvider(client, NS, SECRET, "admit", "admit", "", clock=FakeClock())
    result = await p.reconcile()
    assert result.patched == ["MutatingWebhookConfiguration/admit"] and p.ready()
    assert api.requests_for("validatingwebhookconfigurations") == []


async def test_start_fails_with_one_clear_line_when_the_secret_cannot_be_read(api: FakeKubeAPI, client) -> None:
    api.forbid("secrets")
    p = provider(client, FakeClock())
    with pytest.raises(CertificateError) as info:
        await p.start()
    message = str(info.value)
    assert message.startswith(f"self-managed TLS: cannot read or create Secret {NS}/{SECRET}: GET ")
    assert ": 403 Forbidden" in message
    assert "\n" not in message
    assert not p.ready()


async def test_a_patch_forbidden_at_start_leaves_the_replica_unready_until_the_loop_succeeds(
    api: FakeKubeAPI, client, caplog: pytest.LogCaptureFixture
) -> None:
    api.forbid("mutatingwebhookconfigurations", "patch")
    p = provider(client, FakeClock(), recheck_interval=0.05)
    caplog.set_level(logging.INFO, "admit")
    await p.start()
    try:
        assert p.pair is not None and not p.ready()
        assert ": 403 Forbidden" in p.reason()
        await asyncio.sleep(0.2)
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1  # the same failure is not repeated at every retry
        api.allow("mutatingwebhookconfigurations")
        for _ in range(200):
            if p.ready():
                break
            await asyncio.sleep(0.01)
        assert p.ready()
    finally:
        await p.stop()


def test_plan_rotates_the_leaf_exactly_when_a_third_of_its_lifetime_is_left() -> None:
    clock = FakeClock(dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc))
    policy = selfcerts.Policy()
    m, actions = selfcerts.plan(selfcerts.Material(), policy, "admit", NS, clock=clock)
    assert m.ca is not None and m.leaf is not None and len(actions) == 2
    due = certs.rotation_due_at(m.leaf.cert)
    clock.now = due - dt.timedelta(seconds=1)
    same, actions = selfcerts.plan(m, policy, "admit", NS, clock=clock)
    assert actions == [] and same is m
    clock.now = due
    rotated, actions = selfcerts.plan(m, policy, "admit", NS, clock=clock)
    assert rotated.leaf.fingerprint != m.leaf.fingerprint and rotated.ca is m.ca
    assert actions[0].startswith("tls.crt is due for rotation (expires 2031-01-01T00:00:00Z): issued ")


def test_plan_stages_a_new_ca_when_a_third_of_the_ca_lifetime_is_left_and_switches_only_once_trusted() -> None:
    clock = FakeClock(dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc))
    policy = selfcerts.Policy(ca_stage_seconds=300, ca_overlap_seconds=3600)
    m, _ = selfcerts.plan(selfcerts.Material(), policy, "admit", NS, clock=clock)
    clock.now = certs.rotation_due_at(m.ca.cert)
    staged, actions = selfcerts.plan(m, policy, "admit", NS, clock=clock)
    assert staged.next_ca is not None and staged.staged_at == clock.now and staged.leaf.cert.serial_number != 0
    clock.advance(seconds=300)
    waiting, actions = selfcerts.plan(staged, policy, "admit", NS, clock=clock, next_ca_trusted=False)
    assert waiting.next_ca is staged.next_ca and not any("switched" in a for a in actions)
    switched, actions = selfcerts.plan(staged, policy, "admit", NS, clock=clock, next_ca_trusted=True)
    assert switched.ca is staged.next_ca and switched.previous_ca[0] is staged.ca.cert
    assert certs.is_signed_by(switched.leaf.cert, switched.ca.cert)
    clock.advance(seconds=3599)
    assert selfcerts.plan(switched, policy, "admit", NS, clock=clock)[0].previous_ca is not None
    clock.advance(seconds=1)
    assert selfcerts.plan(switched, policy, "admit", NS, clock=clock)[0].previous_ca is None


def test_plan_replaces_an_expired_ca_and_leaf() -> None:
    clock = FakeClock(dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc))
    m, _ = selfcerts.plan(selfcerts.Material(), selfcerts.Policy(ca_days=1, leaf_days=1), "admit", NS, clock=clock)
    clock.advance(days=2)
    fresh, actions = selfcerts.plan(m, selfcerts.Policy(), "admit", NS, clock=clock)
    assert actions[0].startswith("ca.crt expired at 2030-01-02T00:00:00Z")
    assert fresh.previous_ca is None  # an expired CA is not worth trusting
    assert not certs.is_expired(fresh.leaf.cert, clock) and certs.is_signed_by(fresh.leaf.cert, fresh.ca.cert)


async def test_start_fails_with_one_clear_line_when_the_api_cannot_be_reached() -> None:
    fake = await FakeKubeAPI().start()
    async with fake.api_client() as unreachable:
        await fake.stop()  # nothing listens on that port any more
        p = provider(unreachable, FakeClock())
        with pytest.raises(CertificateError, match=r"^self-managed TLS: cannot read or create Secret .*: cannot reach the Kubernetes API"):
            await p.start()


async def test_a_hung_api_call_times_out_instead_of_blocking_start(api: FakeKubeAPI, client) -> None:
    api.delay("GET", "secrets", 5.0, times=1)
    p = provider(client, FakeClock(), request_timeout=0.2)
    with pytest.raises(CertificateError, match="no answer from the Kubernetes API within 0.2s"):
        await asyncio.wait_for(p.start(), 3)


async def test_no_private_key_reaches_the_logs_even_at_debug_level(
    api: FakeKubeAPI, client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, kubernetes_asyncio's response-body logging included
    clock = FakeClock()
    p = provider(client, clock)
    await p.start()
    try:
        clock.advance(days=250)
        await p.reconcile()
        data = secret_data(api)
        data["tls.key"] = data["tls.key"][:50]
        put_secret_data(api, data)
        await p.reconcile()
    finally:
        await p.stop()
    assert caplog.records
    pem_key_b64 = base64.b64encode(b"-----BEGIN PRIVATE KEY-----").decode()[:24]
    assert "PRIVATE KEY" not in caplog.text and pem_key_b64 not in caplog.text


async def test_a_ca_put_into_ca_next_by_hand_is_rolled_out_with_the_same_stages(
    api: FakeKubeAPI, client, tmp_path
) -> None:
    clock = FakeClock()
    p = provider(client, clock, policy=selfcerts.Policy(ca_stage_seconds=60, ca_overlap_seconds=120))
    await p.reconcile()
    paths = certs.write_development_certificates(tmp_path)  # `admit certs`; only ca.crt/ca.key are used
    data = secret_data(api)
    data["ca-next.crt"], data["ca-next.key"] = paths["ca.crt"].read_bytes(), paths["ca.key"].read_bytes()
    put_secret_data(api, data)  # kubectl patch secret ... (no annotation)
    hand_ca = certs.load_certificates(paths["ca.crt"].read_bytes())[0]

    result = await p.reconcile()
    assert any("restarted the staging period" in a for a in result.actions)
    assert all(hand_ca.serial_number in s for s in bundle_serials(api))
    clock.advance(seconds=61)
    await p.reconcile()
    assert certs.is_signed_by(p.pair.cert, hand_ca)
    clock.advance(seconds=121)
    await p.reconcile()
    assert bundle_serials(api) == {frozenset({hand_ca.serial_number})} and p.ready()


async def test_emptying_tls_crt_and_tls_key_by_hand_gets_a_new_serving_certificate_from_the_same_ca(
    api: FakeKubeAPI, client
) -> None:
    from kubernetes_asyncio import client as k8s

    p = provider(client, FakeClock())
    await p.reconcile()
    before = p.pair.cert.serial_number
    # kubectl -n gang-system patch secret admit-tls -p '{"data":{"tls.crt":"","tls.key":""}}'
    await k8s.CoreV1Api(client).patch_namespaced_secret(SECRET, NS, {"data": {"tls.crt": "", "tls.key": ""}})
    result = await p.reconcile()
    assert p.pair.cert.serial_number != before and result.patched == [] and p.ready()
