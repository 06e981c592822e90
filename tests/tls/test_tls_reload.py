"""Server TLS settings and file-mode hot reload (admit/tls/provider.py), checked with real TLS clients on loopback."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import pathlib
import ssl

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from admit.tls import certs
from admit.tls import provider as tls
from admit.tls.certs import CertificateError
from tests.helpers import serve_tls as serve

LOG = "admit.tls"


@pytest.fixture(scope="module")
def ca() -> certs.CertifiedKey:
    return certs.generate_ca()


def new_leaf(ca: certs.CertifiedKey, **kw) -> certs.CertifiedKey:
    return certs.generate_serving_certificate(ca, "admit", "default", dns_names=["localhost"],
                                              ip_addresses=["127.0.0.1"], **kw)


def write_pair(directory: pathlib.Path, pair: certs.CertifiedKey) -> None:
    certs.write_pem_files(directory, {"tls.crt": (pair.cert_pem, False), "tls.key": (pair.key_pem, True)})


def client_context(ca: certs.CertifiedKey, **kw) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cadata=ca.cert_pem.decode())
    for k, v in kw.items():
        setattr(ctx, k, v)
    return ctx




async def peer_certificate(port: int, ctx: ssl.SSLContext, host: str = "localhost") -> x509.Certificate:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname=host)
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        return x509.load_der_x509_certificate(der)
    finally:
        writer.close()
        await writer.wait_closed()


async def http_get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    writer.write(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: keep-alive\r\n\r\n")
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    length = int([h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")][0].split(b":")[1])
    return head.split(b"\r\n")[0] + b" " + await reader.readexactly(length)


@pytest.fixture
async def started(tmp_path: pathlib.Path, ca: certs.CertifiedKey):
    first = new_leaf(ca)
    write_pair(tmp_path, first)
    provider = tls.FileTLSProvider(tmp_path / "tls.crt", tmp_path / "tls.key", poll_interval=3600)
    await provider.start()
    runner, port = await serve(provider)
    yield provider, port, first
    await provider.stop()
    await runner.cleanup()


async def test_a_client_that_trusts_only_the_ca_verifies_the_served_certificate_by_name_and_ip(
    started, ca: certs.CertifiedKey
) -> None:
    provider, port, first = started
    assert provider.ready() and provider.reason() == ""
    for host in ("localhost", "127.0.0.1"):
        assert (await peer_certificate(port, client_context(ca), host)).serial_number == first.cert.serial_number
    with pytest.raises(ssl.SSLCertVerificationError):
        await peer_certificate(port, client_context(certs.generate_ca()))


async def test_a_changed_file_pair_is_served_at_the_next_handshake_while_an_open_connection_keeps_working(
    started, tmp_path: pathlib.Path, ca: certs.CertifiedKey
) -> None:
    provider, port, first = started
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_context(ca),
                                                   server_hostname="localhost")
    assert await http_get(reader, writer) == b"HTTP/1.1 200 OK ok"

    second = new_leaf(ca)
    write_pair(tmp_path, second)
    assert provider.reload() is True

    # the established connection still works and still has the old certificate
    assert await http_get(reader, writer) == b"HTTP/1.1 200 OK ok"
    old_der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    assert x509.load_der_x509_certificate(old_der).serial_number == first.cert.serial_number
    writer.close()
    await writer.wait_closed()
    # a new handshake sees the new one
    assert (await peer_certificate(port, client_context(ca))).serial_number == second.cert.serial_number
    assert provider.pair.cert.serial_number == second.cert.serial_number
    assert provider.reload() is False  # unchanged files: nothing to do


async def test_the_polling_loop_picks_up_a_rewritten_pair_on_its_own(tmp_path, ca: certs.CertifiedKey) -> None:
    write_pair(tmp_path, new_leaf(ca))
    provider = tls.FileTLSProvider(tmp_path / "tls.crt", tmp_path / "tls.key", poll_interval=0.02)
    await provider.start()
    runner, port = await serve(provider)
    try:
        second = new_leaf(ca)
        write_pair(tmp_path, second)
        for _ in range(100):
            if provider.pair.cert.serial_number == second.cert.serial_number:
                break
            await asyncio.sleep(0.02)
        assert (await peer_certificate(port, client_context(ca))).serial_number == second.cert.serial_number
    finally:
        await provider.stop()
        await runner.cleanup()


@pytest.mark.parametrize(
    "damage",
    ["corrupt certificate", "half-written certificate", "half-written key", "empty key", "missing key file"],
)
async def test_a_corrupt_or_half_written_file_keeps_the_old_certificate_serving_and_logs_one_clear_error(
    started, tmp_path: pathlib.Path, ca: certs.CertifiedKey, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    provider, port, first = started
    second = new_leaf(ca)
    crt, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    if damage == "corrupt certificate":
        crt.write_bytes(b"-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n")
        key.write_bytes(second.key_pem)
    elif damage == "half-written certificate":
        crt.write_bytes(second.cert_pem[: len(second.cert_pem) // 2])
        key.write_bytes(second.key_pem)
    elif damage == "half-written key":
        crt.write_bytes(second.cert_pem)
        key.write_bytes(second.key_pem[:100])
    elif damage == "empty key":
        crt.write_bytes(second.cert_pem)
        key.write_bytes(b"")
    else:
        key.unlink()

    caplog.set_level(logging.DEBUG, LOG)
    for _ in range(4):  # several polls: reported once, after it stayed broken for one poll
        assert provider.reload() is False
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, caplog.text
    line = errors[0].getMessage()
    assert line.startswith("TLS reload failed: ") and "\n" not in line
    assert "still serving" in line and f"serial={first.cert.serial_number:x}" in line
    assert "PRIVATE KEY" not in caplog.text and second.key_pem.decode().splitlines()[1][:24] not in caplog.text
    assert (await peer_certificate(port, client_context(ca))).serial_number == first.cert.serial_number
    assert provider.ready()

    write_pair(tmp_path, second)  # the writer finishes: picked up, no further error
    assert provider.reload() is True
    assert (await peer_certificate(port, client_context(ca))).serial_number == second.cert.serial_number
    assert len([r for r in caplog.records if r.levelno >= logging.ERROR]) == 1


async def test_a_certificate_written_before_its_key_is_a_transient_state_that_is_not_reported(
    started, tmp_path: pathlib.Path, ca: certs.CertifiedKey, caplog: pytest.LogCaptureFixture
) -> None:
    provider, port, first = started
    second = new_leaf(ca)
    caplog.set_level(logging.INFO, LOG)
    (tmp_path / "tls.crt").write_bytes(second.cert_pem)  # key still the old one: mismatch
    assert provider.reload() is False
    assert provider.pair.cert.serial_number == first.cert.serial_number
    (tmp_path / "tls.key").write_bytes(second.key_pem)
    assert provider.reload() is True
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert (await peer_certificate(port, client_context(ca))).serial_number == second.cert.serial_number


async def test_a_key_that_stays_mismatched_is_reported_as_such(
    started, tmp_path: pathlib.Path, ca: certs.CertifiedKey, caplog: pytest.LogCaptureFixture
) -> None:
    provider, _port, first = started
    (tmp_path / "tls.crt").write_bytes(new_leaf(ca).cert_pem)
    caplog.set_level(logging.INFO, LOG)
    provider.reload()
    provider.reload()
    (err,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert f"{tmp_path / 'tls.key'} does not match {tmp_path / 'tls.crt'}" in err
    assert provider.pair.cert.serial_number == first.cert.serial_number


async def test_an_expired_replacement_does_not_replace_a_good_certificate(
    started, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    provider, _port, first = started
    past = lambda: dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=30)  # noqa: E731
    old_ca = certs.generate_ca(days=10, clock=past)
    write_pair(tmp_path, certs.generate_serving_certificate(old_ca, "admit", "default", days=5, clock=past))
    provider.reload(settle=False)
    assert provider.pair.cert.serial_number == first.cert.serial_number
    assert "expired at" in caplog.text and "keeping the current certificate" in caplog.text


async def test_switching_from_an_rsa_to_an_ecdsa_key_serves_only_the_new_certificate(
    tmp_path: pathlib.Path, ca: certs.CertifiedKey
) -> None:
    # OpenSSL keeps one certificate per key type in a context: re-loading into the same context would keep
    # offering the RSA certificate to clients that prefer RSA.
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = dt.datetime.now(dt.timezone.utc)
    rsa_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "rsa")]))
        .issuer_name(ca.cert.subject)
        .public_key(rsa_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    (tmp_path / "tls.crt").write_bytes(rsa_cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "tls.key").write_bytes(rsa_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()))
    provider = tls.FileTLSProvider(tmp_path / "tls.crt", tmp_path / "tls.key", poll_interval=3600)
    await provider.start()
    runner, port = await serve(provider)
    try:
        assert (await peer_certificate(port, client_context(ca))).serial_number == rsa_cert.serial_number
        ecdsa = new_leaf(ca)
        write_pair(tmp_path, ecdsa)
        assert provider.reload() is True
        rsa_only = client_context(ca, maximum_version=ssl.TLSVersion.TLSv1_2)
        rsa_only.set_ciphers("ECDHE-RSA-AES128-GCM-SHA256")
        for ctx in (client_context(ca), rsa_only):
            try:
                served = (await peer_certificate(port, ctx)).serial_number
            except (ssl.SSLError, ConnectionError):
                served = None  # no RSA certificate left to offer: fine
            assert served in (ecdsa.cert.serial_number, None)
            assert served != rsa_cert.serial_number
    finally:
        await provider.stop()
        await runner.cleanup()


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
async def test_tls_1_1_and_non_aead_ciphers_are_refused_while_tls_1_2_and_1_3_work(
    started, ca: certs.CertifiedKey
) -> None:
    _provider, port, first = started
    tls13 = client_context(ca, minimum_version=ssl.TLSVersion.TLSv1_3)
    tls12 = client_context(ca, maximum_version=ssl.TLSVersion.TLSv1_2)
    for ctx in (tls13, tls12):
        assert (await peer_certificate(port, ctx)).serial_number == first.cert.serial_number

    old = client_context(ca)
    old.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    old.maximum_version = ssl.TLSVersion.TLSv1_1
    try:
        old.set_ciphers("ALL:@SECLEVEL=0")
    except ssl.SSLError:
        pass
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await peer_certificate(port, old)

    cbc = client_context(ca, maximum_version=ssl.TLSVersion.TLSv1_2)
    cbc.set_ciphers("ECDHE-ECDSA-AES128-SHA256:ECDHE-ECDSA-AES128-SHA:AES128-SHA")
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await peer_certificate(port, cbc)


def test_the_server_context_requires_tls_1_2_and_offers_only_forward_secret_aead_suites() -> None:
    ctx = tls.create_server_ssl_context()
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert ctx.options & ssl.OP_NO_COMPRESSION
    for c in ctx.get_ciphers():
        if c["protocol"] == "TLSv1.3":
            continue
        assert c["aead"] and c["kea"] == "kx-ecdhe", c["name"]


async def test_start_fails_with_a_clear_message_when_the_files_are_missing(tmp_path: pathlib.Path) -> None:
    provider = tls.FileTLSProvider(tmp_path / "tls.crt", tmp_path / "tls.key")
    assert not provider.ready() and provider.reason() == "no serving certificate loaded"
    with pytest.raises(CertificateError, match=r"no usable TLS pair in .*tls.crt .*cannot read .*tls.crt"):
        await provider.start()
    assert "cannot read" in provider.reason()


async def test_readiness_turns_false_once_the_served_certificate_has_expired(
    tmp_path: pathlib.Path, ca: certs.CertifiedKey, caplog: pytest.LogCaptureFixture
) -> None:
    pair = new_leaf(ca, days=3)
    write_pair(tmp_path, pair)
    now = [dt.datetime.now(dt.timezone.utc)]
    provider = tls.FileTLSProvider(tmp_path / "tls.crt", tmp_path / "tls.key", clock=lambda: now[0])
    await provider.start()
    try:
        assert provider.ready()
        now[0] += dt.timedelta(days=2, hours=1)  # less than a third left: one warning, still ready
        caplog.set_level(logging.INFO, LOG)
        provider.reload()
        provider.reload()
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "due for renewal" in warnings[0].getMessage()
        assert provider.ready()
        now[0] += dt.timedelta(days=1)
        assert not provider.ready()
        assert provider.reason().startswith("serving certificate expired at ")
    finally:
        await provider.stop()
