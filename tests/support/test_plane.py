"""The real control-plane launcher's pieces that need no control plane (tests/support/plane.py): finding the
binaries the tester brings, the chart's webhooks pointed at a URL, the client certificates, and how the tier reports
missing binaries (one skip line for the run; a failure with ADMIT_REQUIRE_REAL=1), and the plane's own requests
(a raw admin connection, the wait for kube-apiserver to call the webhooks just registered) against a TLS stand-in made
from the plane's PKI."""

from __future__ import annotations

import base64
import http.server
import json
import os
import ssl
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from admit.tls.certs import generate_ca
from tests.support.plane import (
    REQUIRED, TIERS, NoBinaries, PlaneError, api_path, available_binaries, client_certificate, find_binaries,
    pod_group_crd, render_webhooks,
)
from tests.helpers import ROOT


def fake_binaries(folder: Path, names) -> Path:
    """Executable stand-ins named like the real binaries (they are found, never run)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_text("#!/bin/sh\n")
        (folder / name).chmod(0o755)
    return folder


@pytest.fixture
def no_asset_variables(monkeypatch):
    monkeypatch.delenv("ADMIT_K8S_ASSETS", raising=False)
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)


def test_admit_k8s_assets_names_a_folder_of_plain_binaries_and_says_what_it_lacks(tmp_path, monkeypatch,
                                                                                     no_asset_variables):
    fake_binaries(tmp_path, REQUIRED[:-1])
    monkeypatch.setenv("ADMIT_K8S_ASSETS", str(tmp_path))
    with pytest.raises(NoBinaries, match=f"no {REQUIRED[-1]} .*ADMIT_K8S_ASSETS={tmp_path}"):
        find_binaries()
    fake_binaries(tmp_path, REQUIRED[-1:])
    assert find_binaries() == {name: tmp_path / name for name in REQUIRED}


def test_envtest_assets_supply_etcd_and_kube_apiserver_and_admit_k8s_assets_the_rest(tmp_path, monkeypatch,
                                                                                       no_asset_variables):
    envtest = fake_binaries(tmp_path / "envtest" / "k8s" / "1.36.2-linux-amd64", ("etcd", "kube-apiserver", "kubectl"))
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(envtest))
    assert find_binaries(TIERS["apiserver"]) == {"etcd": envtest / "etcd", "kube-apiserver": envtest / "kube-apiserver"}
    with pytest.raises(NoBinaries, match="no kube-controller-manager"):
        find_binaries(TIERS["controllers"])
    own = fake_binaries(tmp_path / "own", ("kube-apiserver", "kube-controller-manager"))
    monkeypatch.setenv("ADMIT_K8S_ASSETS", str(own))
    found = find_binaries(TIERS["controllers"])
    assert found == {"etcd": envtest / "etcd", "kube-apiserver": own / "kube-apiserver",  # ADMIT_K8S_ASSETS first
                     "kube-controller-manager": own / "kube-controller-manager"}


def test_a_file_that_is_not_executable_is_not_a_binary(tmp_path, monkeypatch, no_asset_variables):
    (tmp_path / "etcd").write_text("not a program")
    monkeypatch.setenv("ADMIT_K8S_ASSETS", str(tmp_path))
    assert available_binaries() == {}


def test_without_any_variable_the_reason_is_one_line_that_says_what_to_set(no_asset_variables):
    with pytest.raises(NoBinaries) as info:
        find_binaries()
    message = str(info.value)
    assert "ADMIT_K8S_ASSETS is not set" in message and "docs/testing.md" in message and "\n" not in message


def test_the_pod_group_crd_of_the_plane_is_the_one_admits_chart_installs():
    crd = pod_group_crd()
    assert crd["spec"]["group"] == "scheduling.x-k8s.io" and crd["spec"]["names"]["plural"] == "podgroups"
    assert [v["name"] for v in crd["spec"]["versions"]] == ["v1alpha1"]
    assert crd["spec"]["versions"][0]["subresources"] == {"status": {}}


def test_the_chart_webhooks_are_pointed_at_a_url_with_the_ca_and_keep_the_charts_rules():
    hooks = render_webhooks("https://127.0.0.1:9443", b"-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n")
    assert [h["kind"] for h in hooks] == ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]
    entries = [w for h in hooks for w in h["webhooks"]]
    assert {w["name"] for w in entries} == {"workloads.mutate.admit.dev", "pods.mutate.admit.dev",
                                            "workloads.validate.admit.dev", "scale.validate.admit.dev",
                                            "pods.validate.admit.dev"}
    for w in entries:
        assert "service" not in w["clientConfig"]
        assert w["clientConfig"]["url"] in ("https://127.0.0.1:9443/mutate", "https://127.0.0.1:9443/validate")
        assert base64.b64decode(w["clientConfig"]["caBundle"]).startswith(b"-----BEGIN CERTIFICATE-----")
        assert w["namespaceSelector"] and w["failurePolicy"] in ("Fail", "Ignore")


def test_client_certificates_carry_the_user_and_groups_kube_apiserver_reads():
    ca = generate_ca("test CA", days=1)
    pair = client_certificate(ca, "system:serviceaccount:admit-system:admit", ["system:serviceaccounts"])
    cert = x509.load_pem_x509_certificate(pair.cert_pem)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == \
        "system:serviceaccount:admit-system:admit"
    assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == \
        ["system:serviceaccounts"]
    assert cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value == \
        x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])
    assert cert.issuer == ca.cert.subject


class _Answers(http.server.BaseHTTPRequestHandler):
    """A kube-apiserver stand-in's request handler: each request (method, path with query, decoded JSON body,
    client certificate CN) is kept on the server's ``seen``; the server's ``answer(method, path, body)`` gives the
    status and JSON body to send. Keep-alive (HTTP/1.1), as ControlPlane.rest reuses its connection."""

    protocol_version = "HTTP/1.1"

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        cn = [v for rdn in self.connection.getpeercert()["subject"] for k, v in rdn if k == "commonName"]
        self.server.seen.append((self.command, self.path, body, cn))  # type: ignore[attr-defined]
        status, answer = self.server.answer(self.command, self.path, body)  # type: ignore[attr-defined]
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _handle

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def plane_server(tmp_path):
    """A ControlPlane whose ``server`` is a TLS server made from the plane's own PKI (``_pki``, as ``start`` makes it)
    that requires a client certificate signed by the plane's CA, as kube-apiserver's ``--client-ca-file`` does;
    yields ``(plane, server)``: set ``server.answer``, read ``server.seen``."""
    from tests.support.plane import ControlPlane

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    cp = ControlPlane({}, workdir=tmp_path, kubelet=False)
    cp.server = f"https://127.0.0.1:{httpd.server_address[1]}"
    pki = cp._pki(tmp_path)  # noqa: SLF001 - the PKI start() makes, without the processes
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(pki["apiserver.crt"]), str(pki["apiserver.key"]))
    ctx.load_verify_locations(str(pki["ca.crt"]))
    ctx.verify_mode = ssl.CERT_REQUIRED
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    httpd.seen = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield cp, httpd
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)


def test_a_raw_admin_connection_presents_the_admin_certificate_to_the_plane_server(plane_server):
    # ControlPlane.connect: the connection a real-tier test parks a request on (test_real_throttling)
    cp, server = plane_server
    server.answer = lambda method, path, body: (200, {"major": "1", "minor": "36"})
    conn = cp.connect(timeout=10)
    try:
        conn.request("GET", "/version")
        answer = conn.getresponse()
        assert (answer.status, json.loads(answer.read())) == (200, {"major": "1", "minor": "36"})
    finally:
        conn.close()
    assert server.seen == [("GET", "/version", None, ["admin"])]


def test_waiting_for_the_webhooks_dry_runs_a_gang_deployment_until_admit_has_labelled_it(plane_server):
    # kube-apiserver answers the first dry run as stored without admit (its informer has not delivered the
    # configurations yet), the second with admit's mutation
    cp, server = plane_server

    def answer(method, path, body):
        if len(server.seen) == 1:
            return 201, body
        return 201, {**body, "metadata": {**body["metadata"], "labels": {"gang.admit.dev/managed": "true"}}}

    server.answer = answer
    cp.wait_webhooks_answer(timeout=30)
    assert [(m, p) for m, p, _, _ in server.seen] == [
        ("POST", "/apis/apps/v1/namespaces/default/deployments?dryRun=All")] * 2
    assert server.seen[0][2]["metadata"]["annotations"] == {"gang.admit.dev/min-member": "2"}


def test_waiting_for_webhooks_that_never_answer_fails_with_kube_apiservers_last_refusal(plane_server):
    cp, server = plane_server
    server.answer = lambda method, path, body: (500, {
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500, "reason": "InternalError",
        "message": 'Internal error occurred: failed calling webhook "workloads.mutate.admit.dev": failed to call '
                   'webhook: Post "https://127.0.0.1:9/mutate": dial tcp 127.0.0.1:9: connect: connection refused'})
    with pytest.raises(PlaneError) as failed:
        cp.wait_webhooks_answer(timeout=0.5)
    assert "did not call admit's webhooks within 0.5s" in str(failed.value)
    assert 'failed calling webhook "workloads.mutate.admit.dev"' in str(failed.value)


@pytest.mark.parametrize("obj,path", [
    ({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}, "/api/v1/namespaces"),
    ({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x", "namespace": "n"}},
     "/apis/apps/v1/namespaces/n/deployments"),
    ({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "x"}},
     "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"),
    ({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "x"}},
     "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"),
    ({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
      "metadata": {"name": "x"}}, "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"),
])
def test_objects_are_created_under_their_collection_path(obj, path):
    assert api_path(obj) == path


def run_tier(assets: Path, *args: str, require: bool = False) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBEBUILDER_ASSETS", "ADMIT_REQUIRE_REAL")}
    env["ADMIT_K8S_ASSETS"] = str(assets)
    env["CI"] = "true"  # as .ci/run runs it: CI no longer changes what the tier does
    if require:
        env["ADMIT_REQUIRE_REAL"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)


def test_without_binaries_the_whole_real_tier_skips_under_one_line_also_in_ci(tmp_path):
    skipped = run_tier(tmp_path, "tests/real")  # an empty folder: no binaries
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    lines = [line for line in skipped.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(lines) == 1, lines
    count = int(lines[0].split("[", 1)[1].split("]", 1)[0])
    assert count >= 40 and f"{count} skipped" in skipped.stdout
    assert "ADMIT_K8S_ASSETS" in lines[0] and "docs/testing.md" in lines[0] and "shared" not in lines[0]
    assert len(lines[0]) < 300


def test_with_admit_require_real_missing_binaries_fail_the_tier(tmp_path):
    failed = run_tier(tmp_path, "tests/real/test_real_replicas.py", "-k", "two_replicas", require=True)
    assert failed.returncode == 1
    assert "ADMIT_REQUIRE_REAL is set" in failed.stdout and "1 error" in failed.stdout


def test_with_only_envtests_binaries_a_coscheduling_test_skips_naming_what_it_still_needs(tmp_path):
    fake_binaries(tmp_path, ("etcd", "kube-apiserver"))
    skipped = run_tier(tmp_path, "tests/real/test_real_replicas.py", "-k", "two_replicas")
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    (line,) = [line for line in skipped.stdout.splitlines() if line.startswith("SKIPPED")]
    assert "no kube-controller-manager, scheduler-plugins-scheduler (" in line


def test_every_real_test_declares_a_tier_the_plane_knows():
    listed = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only",
                             "tests/real"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    from tests.real import conftest

    for path in (ROOT / "tests" / "real").glob("test_*.py"):
        text = path.read_text()
        for tier in conftest.re.findall(r'mark\.needs\("([a-z]+)"\)', text):
            assert tier in TIERS, (path.name, tier)


def test_the_real_tier_has_no_undefined_names_even_where_it_cannot_run():
    """tests/real runs only where someone brings the binaries; a name used there but never imported would surface
    only on that machine (it happened once, with ``gang_deployment``)."""
    from pyflakes.api import checkPath
    from pyflakes.messages import ImportStarUsage, UndefinedExport, UndefinedLocal, UndefinedName
    from pyflakes.reporter import Reporter

    class Collect(Reporter):
        def __init__(self) -> None:
            self.found: list[str] = []

        def flake(self, message) -> None:
            if isinstance(message, (UndefinedName, UndefinedLocal, UndefinedExport, ImportStarUsage)):
                self.found.append(str(message))

        def syntaxError(self, filename, msg, lineno, offset, text) -> None:  # noqa: N802 (pyflakes' API)
            self.found.append(f"{filename}:{lineno}: {msg}")

        def unexpectedError(self, filename, msg) -> None:  # noqa: N802
            self.found.append(f"{filename}: {msg}")

    reporter = Collect()
    for path in sorted((ROOT / "tests" / "real").glob("*.py")) + sorted((ROOT / "tests" / "support").glob("*.py")):
        checkPath(str(path), reporter)
    assert reporter.found == []
