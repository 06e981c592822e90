"""Certificate generation, loading, validation and expiry arithmetic (admit/tls/certs.py)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import shutil
import stat
import subprocess

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from admit.tls import certs
from admit.tls.certs import CertificateError

T0 = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.timezone.utc)


class FakeClock:
    def __init__(self, now: dt.datetime = T0) -> None:
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, **kw: float) -> None:
        self.now += dt.timedelta(**kw)


@pytest.fixture(scope="module")
def ca() -> certs.CertifiedKey:
    return certs.generate_ca(clock=FakeClock())


@pytest.fixture(scope="module")
def leaf(ca: certs.CertifiedKey) -> certs.CertifiedKey:
    return certs.generate_serving_certificate(
        ca, "admit", "gang", dns_names=["admit.example.com"], ip_addresses=["10.0.0.7", "::1"], clock=FakeClock()
    )


def test_the_ca_is_a_p256_path_length_zero_ca_that_may_only_sign_certificates(ca: certs.CertifiedKey) -> None:
    cert = ca.cert
    assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
    assert cert.public_key().curve.name == "secp256r1"
    bc = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert bc.critical and bc.value.ca and bc.value.path_length == 0
    ku = cert.extensions.get_extension_for_class(x509.KeyUsage)
    assert ku.critical and ku.value.key_cert_sign and ku.value.crl_sign and not ku.value.digital_signature
    assert cert.issuer == cert.subject
    assert certs.is_signed_by(cert, cert)


def test_the_serving_certificate_covers_every_in_cluster_service_name_plus_extra_names_and_ips(
    leaf: certs.CertifiedKey,
) -> None:
    assert certs.subject_alt_names(leaf.cert) == [
        "admit",
        "admit.gang",
        "admit.gang.svc",
        "admit.gang.svc.cluster.local",
        "admit.example.com",
        "10.0.0.7",
        "::1",
    ]
    assert certs.missing_names(leaf.cert, ["ADMIT.gang.svc", "10.0.0.7", "0:0::1"]) == []
    assert certs.missing_names(leaf.cert, ["other.gang.svc", "10.0.0.8"]) == ["other.gang.svc", "10.0.0.8"]
    eku = leaf.cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert leaf.cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    assert leaf.cert.extensions.get_extension_for_class(x509.KeyUsage).value.digital_signature


def test_an_ip_literal_among_dns_names_becomes_an_ip_san_and_duplicates_are_dropped(ca: certs.CertifiedKey) -> None:
    pair = certs.generate_serving_certificate(
        ca, "admit", "gang", dns_names=["127.0.0.1", "admit"], ip_addresses=["127.0.0.1"], clock=FakeClock()
    )
    san = pair.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert san.get_values_for_type(x509.DNSName).count("admit") == 1


def test_a_bad_ip_address_or_empty_service_name_is_refused(ca: certs.CertifiedKey) -> None:
    with pytest.raises(CertificateError, match="not an IP address"):
        certs.generate_serving_certificate(ca, "admit", "gang", ip_addresses=["10.0.0.300"], clock=FakeClock())
    with pytest.raises(CertificateError, match="must not be empty"):
        certs.generate_serving_certificate(ca, "", "gang", clock=FakeClock())


def test_not_before_is_five_minutes_in_the_past_and_default_lifetimes_are_ten_years_and_one_year(
    ca: certs.CertifiedKey, leaf: certs.CertifiedKey
) -> None:
    assert ca.cert.not_valid_before_utc == T0 - dt.timedelta(minutes=5)
    assert ca.cert.not_valid_after_utc == T0 + dt.timedelta(days=3650)
    assert leaf.cert.not_valid_before_utc == T0 - dt.timedelta(minutes=5)
    assert leaf.cert.not_valid_after_utc == T0 + dt.timedelta(days=365)


def test_lifetimes_are_configurable_and_a_leaf_never_outlives_its_ca() -> None:
    short_ca = certs.generate_ca(days=30, clock=FakeClock())
    pair = certs.generate_serving_certificate(short_ca, "admit", "gang", days=90, clock=FakeClock())
    assert pair.cert.not_valid_after_utc == short_ca.cert.not_valid_after_utc == T0 + dt.timedelta(days=30)
    with pytest.raises(CertificateError, match="lifetime must be a positive"):
        certs.generate_ca(days=0)


def test_an_expired_ca_cannot_issue() -> None:
    clock = FakeClock()
    ca = certs.generate_ca(days=1, clock=clock)
    clock.advance(days=2)
    with pytest.raises(CertificateError, match="expired CA"):
        certs.generate_serving_certificate(ca, "admit", "gang", clock=clock)


def test_load_pair_round_trips_generated_pem(leaf: certs.CertifiedKey) -> None:
    again = certs.load_pair(leaf.cert_pem, leaf.key_pem)
    assert again.fingerprint == leaf.fingerprint
    assert certs.key_matches_certificate(again.cert, again.key)


def test_a_key_that_does_not_match_its_certificate_is_refused(
    ca: certs.CertifiedKey, leaf: certs.CertifiedKey
) -> None:
    with pytest.raises(CertificateError, match="tls.key does not match tls.crt"):
        certs.load_pair(leaf.cert_pem, ca.key_pem)


@pytest.mark.parametrize(
    ("cert_pem", "message"),
    [
        (b"", "tls.crt is empty"),
        (b"hello", "not a PEM certificate"),
        (b"-----BEGIN CERTIFICATE-----\nMIIB", "truncated"),
        (b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n", "not valid PEM"),
    ],
)
def test_corrupt_empty_or_truncated_certificates_raise_one_clear_error(
    leaf: certs.CertifiedKey, cert_pem: bytes, message: str
) -> None:
    with pytest.raises(CertificateError, match=message) as info:
        certs.load_pair(cert_pem, leaf.key_pem)
    assert "\n" not in str(info.value)


def test_a_half_written_key_raises_without_echoing_key_material(leaf: certs.CertifiedKey) -> None:
    half = leaf.key_pem[: len(leaf.key_pem) // 2]
    with pytest.raises(CertificateError, match="tls.key cannot be parsed") as info:
        certs.load_pair(leaf.cert_pem, half)
    body = leaf.key_pem.decode().splitlines()[1]
    assert body[:20] not in str(info.value)
    assert "PRIVATE KEY" not in repr(leaf) and body[:20] not in repr(leaf)


def test_a_leaf_from_another_ca_is_detected(leaf: certs.CertifiedKey) -> None:
    other = certs.generate_ca(clock=FakeClock())
    assert not certs.is_signed_by(leaf.cert, other.cert)


def test_a_certificate_outside_its_validity_window_is_named_with_the_window(leaf: certs.CertifiedKey) -> None:
    clock = FakeClock()
    assert certs.validity_problem(leaf.cert, clock, "tls.crt") == ""
    clock.advance(days=366)
    assert certs.validity_problem(leaf.cert, clock, "tls.crt").startswith("tls.crt expired at 2031-01-01T12:00:00Z")
    assert "not valid before" in certs.validity_problem(leaf.cert, FakeClock(T0 - dt.timedelta(hours=1)), "tls.crt")


def test_a_leaf_certificate_is_not_accepted_as_a_ca(leaf: certs.CertifiedKey) -> None:
    assert "not a CA certificate" in certs.ca_problem(leaf, clock=FakeClock())


def test_rotation_is_due_when_less_than_a_third_of_the_lifetime_is_left(leaf: certs.CertifiedKey) -> None:
    life = dt.timedelta(days=365, minutes=5)
    assert leaf.cert.not_valid_after_utc - leaf.cert.not_valid_before_utc == life
    due = certs.rotation_due_at(leaf.cert)
    assert due == leaf.cert.not_valid_after_utc - life / 3
    clock = FakeClock(due - dt.timedelta(seconds=1))
    assert not certs.needs_rotation(leaf.cert, clock)
    clock.advance(seconds=1)
    assert certs.needs_rotation(leaf.cert, clock)
    assert not certs.is_expired(leaf.cert, clock)
    clock.now = leaf.cert.not_valid_after_utc
    assert certs.is_expired(leaf.cert, clock) and certs.needs_rotation(leaf.cert, clock)
    assert certs.needs_rotation(leaf.cert, FakeClock(due), fraction=0.5)
    with pytest.raises(ValueError):
        certs.rotation_due_at(leaf.cert, fraction=1.5)


def test_a_ca_bundle_is_canonical_so_replicas_agree_byte_for_byte(ca: certs.CertifiedKey) -> None:
    later = certs.generate_ca(clock=FakeClock(T0 + dt.timedelta(days=1)))
    a = certs.pem_bundle([later.cert, ca.cert, later.cert])
    b = certs.pem_bundle([ca.cert, later.cert])
    assert a == b
    assert [c.serial_number for c in certs.load_certificates(a)] == [ca.cert.serial_number, later.cert.serial_number]
    assert certs.bundle_fingerprints(a) == {ca.fingerprint, later.fingerprint}
    assert certs.bundle_fingerprints(b"") == frozenset()
    assert certs.bundle_fingerprints(b"garbage") is None


def test_development_certificates_are_written_with_private_keys_at_0600(tmp_path) -> None:
    paths = certs.write_development_certificates(tmp_path / "certs")
    assert sorted(paths) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    modes = {name: stat.S_IMODE(p.stat().st_mode) for name, p in paths.items()}
    assert modes == {"ca.crt": 0o644, "ca.key": 0o600, "tls.crt": 0o644, "tls.key": 0o600}
    pair = certs.load_pair(paths["tls.crt"].read_bytes(), paths["tls.key"].read_bytes())
    assert {"localhost", "127.0.0.1", "admit.default.svc"} <= set(certs.subject_alt_names(pair.cert))
    assert [p.name for p in (tmp_path / "certs").iterdir() if p.name.startswith(".")] == []


def test_rewriting_a_key_file_with_a_loose_mode_tightens_it_to_0600(tmp_path) -> None:
    target = tmp_path / "tls.key"
    target.write_bytes(b"old")
    target.chmod(0o666)
    certs.write_pem_files(tmp_path, {"tls.key": (b"new", True)})
    assert stat.S_IMODE(target.stat().st_mode) == 0o600 and target.read_bytes() == b"new"


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI not installed")
def test_openssl_verify_accepts_the_development_certificates_for_the_service_name(tmp_path) -> None:
    paths = certs.write_development_certificates(tmp_path, service="admit", namespace="gang")
    for host in ("admit.gang.svc", "localhost"):
        out = subprocess.run(
            ["openssl", "verify", "-CAfile", paths["ca.crt"], "-purpose", "sslserver", "-verify_hostname", host,
             paths["tls.crt"]],
            capture_output=True, text=True, check=False,
        )
        assert out.returncode == 0 and out.stdout.strip().endswith(": OK"), out.stdout + out.stderr
    out = subprocess.run(
        ["openssl", "verify", "-CAfile", paths["ca.crt"], "-verify_ip", "127.0.0.1", paths["tls.crt"]],
        capture_output=True, text=True, check=False,
    )
    assert out.returncode == 0, out.stderr
