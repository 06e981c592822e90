"""The real control-plane launcher's pieces that need no control plane (admit/testing/plane.py): finding and
unpacking the binaries, the chart's webhooks pointed at a URL, the client certificates, and how the tier reports
missing binaries (one skip line; a failure under CI=true)."""

from __future__ import annotations

import base64
import hashlib
import lzma
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from admit.certs import generate_ca
from admit.testing.plane import (
    REQUIRED, NoBinaries, PlaneError, api_path, client_certificate, find_binaries, render_webhooks, unpack,
)
from tests.helpers import ROOT


def fake_release(folder: Path, corrupt: str | None = None) -> Path:
    """A ``bin/`` folder shaped like ../shared/k8s/bin: ``<name>.xz`` files and SHA256SUMS.txt of the unpacked ones."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True)
    sums = []
    for name in REQUIRED:
        data = f"#!/bin/sh\necho {name}\n".encode()
        (bin_dir / f"{name}.xz").write_bytes(lzma.compress(data if name != corrupt else data + b"tampered"))
        sums.append(f"{hashlib.sha256(data).hexdigest()}  {name}")
    (bin_dir / "SHA256SUMS.txt").write_text("\n".join(sums) + "\n")
    return bin_dir


def test_the_binaries_are_unpacked_once_into_a_folder_keyed_on_their_checksums(tmp_path):
    bin_dir = fake_release(tmp_path / "release")
    cache = tmp_path / "cache"
    target = unpack(bin_dir, cache)
    key = hashlib.sha256((bin_dir / "SHA256SUMS.txt").read_bytes()).hexdigest()[:16]
    assert target == cache / f"k8s-{key}"
    for name in REQUIRED:
        assert os.access(target / name, os.X_OK)
        assert (target / name).read_text() == f"#!/bin/sh\necho {name}\n"
    stamp = (target / "etcd").stat().st_mtime_ns
    for name in REQUIRED:
        (bin_dir / f"{name}.xz").unlink()  # a complete folder is reused without reading the archives
    assert unpack(bin_dir, cache) == target and (target / "etcd").stat().st_mtime_ns == stamp


def test_an_archive_that_does_not_match_its_checksum_is_refused_and_leaves_nothing_behind(tmp_path):
    bin_dir = fake_release(tmp_path / "release", corrupt="kube-apiserver")
    with pytest.raises(PlaneError, match="kube-apiserver.xz: unpacked sha256 .* does not match SHA256SUMS.txt"):
        unpack(bin_dir, tmp_path / "cache")
    (target,) = (tmp_path / "cache").iterdir()
    assert not (target / "kube-apiserver").exists() and not (target / ".complete").exists()
    assert not [p for p in target.iterdir() if p.name.endswith(".part")]


def test_admit_k8s_assets_names_a_folder_of_plain_binaries_and_says_what_it_lacks(tmp_path, monkeypatch):
    for name in REQUIRED[:-1]:
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv("ADMIT_K8S_ASSETS", str(tmp_path))
    with pytest.raises(NoBinaries, match=f"lacks executable {REQUIRED[-1]}"):
        find_binaries()
    (tmp_path / REQUIRED[-1]).write_text("#!/bin/sh\n")
    (tmp_path / REQUIRED[-1]).chmod(0o755)
    assert find_binaries() == tmp_path


def test_without_a_shared_folder_the_reason_names_both_places(tmp_path, monkeypatch):
    monkeypatch.delenv("ADMIT_K8S_ASSETS", raising=False)
    with pytest.raises(NoBinaries) as info:
        find_binaries(tmp_path / "nowhere")
    assert "$ADMIT_K8S_ASSETS" in str(info.value) and str(tmp_path / "nowhere" / "bin") in str(info.value)
    assert "\n" not in str(info.value)


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


def run_tier(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["ADMIT_K8S_ASSETS"] = str(tmp_path)  # an empty folder: no binaries
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                           "tests/real/test_real_replicas.py", "-k", "two_replicas"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


def test_without_binaries_the_real_tier_skips_with_one_line_and_fails_under_ci(tmp_path):
    skipped = run_tier(tmp_path, None)
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    lines = [line for line in skipped.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(lines) == 1 and "real control-plane tier skipped" in lines[0] and "lacks executable" in lines[0]
    failed = run_tier(tmp_path, "true")
    assert failed.returncode == 1
    assert "real control-plane tier cannot run under CI=true" in failed.stdout
