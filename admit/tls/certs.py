"""Certificates for admit's HTTPS endpoint: generate, load, validate, check expiry, write PEM files.

Pure code on top of ``cryptography`` (no I/O except :func:`write_pem_files` and :func:`write_development_certificates`),
used by ``admit certs``, by :mod:`admit.tls.provider` (file mode) and by :mod:`admit.tls.selfcerts` (self-managed mode).
What admit issues, and why (kube-apiserver dials ``<service>.<namespace>.svc`` and checks it against the subjectAltName;
Go ``crypto/x509`` ignores the Common Name): docs/certificates.md. The sources of the rules:

- ECDSA P-256 keys, SHA-256 signatures (NIST FIPS 186-4).
- CA: ``basicConstraints CA:TRUE, pathlen:0`` (critical), ``keyUsage keyCertSign, cRLSign`` (critical), subject and
  authority key identifiers (RFC 5280 4.2.1.9, 4.2.1.3, 4.2.1.2, 4.2.1.1).
- Serving certificate: ``CA:FALSE`` (critical), ``keyUsage digitalSignature`` (critical; RFC 5280 4.2.1.3, RFC 8446),
  ``extendedKeyUsage serverAuth`` (RFC 5280 4.2.1.12), the Service names as ``subjectAltName`` (RFC 5280 4.2.1.6);
  its ``notAfter`` never past the CA's (RFC 5280 6.1.3). ``notBefore`` is :data:`BACKDATE` in the past (clock skew).
- Serial numbers: random, positive, at most 20 octets (RFC 5280 4.1.2.2). Keys are written as unencrypted PKCS#8 PEM,
  mode 0600 (certificates 0644), atomically (temporary file + ``os.replace``).

Times are aware UTC datetimes, lifetimes days; whatever depends on the current time takes a ``clock`` (a
zero-argument callable returning an aware UTC datetime) so tests move time without sleeping.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import ipaddress
import os
import pathlib
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

Clock = Callable[[], _dt.datetime]

DEFAULT_CA_DAYS = 3650  # the CA's lifetime in days (10 years)
DEFAULT_LEAF_DAYS = 365  # the serving certificate's (1 year)
DEFAULT_ROTATION_FRACTION = 1 / 3  # rotate when less than this fraction of notAfter - notBefore is left
BACKDATE = _dt.timedelta(minutes=5)  # notBefore this far in the past: clock skew between admit and kube-apiserver


class CertificateError(ValueError):
    """An unusable certificate, key or pair; ``str(err)`` is one line an operator can act on, never key material."""


def utcnow() -> _dt.datetime:
    """The default clock: the current time as an aware UTC datetime."""
    return _dt.datetime.now(_dt.timezone.utc)


@dataclass(frozen=True)
class CertifiedKey:
    """A certificate and its private key (never logged: ``repr`` hides it), parsed and as PEM (unencrypted PKCS#8)."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey
    cert_pem: bytes
    key_pem: bytes

    def __repr__(self) -> str:  # never print key material
        return f"CertifiedKey({describe(self.cert)})"

    @property
    def fingerprint(self) -> str:
        """SHA-256 fingerprint of the certificate (hex, lower case)."""
        return fingerprint(self.cert)


def service_dns_names(service: str, namespace: str, cluster_domain: str = "cluster.local") -> list[str]:
    """The DNS names under which a Service is reached inside the cluster: ``[<svc>, <svc>.<ns>, <svc>.<ns>.svc,
    <svc>.<ns>.svc.<cluster_domain>]`` (the kubelet's ``--cluster-domain`` default ``cluster.local``). kube-apiserver
    dials ``<svc>.<ns>.svc`` for a webhook ``clientConfig.service`` (Kubernetes docs, "Dynamic Admission Control"); the
    other forms serve clients that use the short or fully qualified name. Raises CertificateError for an empty
    ``service`` or ``namespace``."""
    if not service or not namespace:
        raise CertificateError("service name and namespace must not be empty")
    domain = cluster_domain.strip(".") or "cluster.local"
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.{domain}"]


def _name_key(name: str) -> str | ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An IP literal as an address, a DNS name lower-cased: how a SAN entry is compared."""
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return name.lower()


def _subject_alt_name(names: Iterable[str], ip_addresses: Iterable[str]) -> x509.SubjectAlternativeName:
    """The SAN of ``names`` (an IP literal among them becomes an IP entry) and ``ip_addresses``, duplicates and
    blanks dropped. Raises CertificateError for an entry of ``ip_addresses`` that is not an IP address."""
    dns: dict[str, None] = {}
    ips: dict[ipaddress.IPv4Address | ipaddress.IPv6Address, None] = {}
    for name in filter(None, (n.strip() for n in names)):
        try:
            ips[ipaddress.ip_address(name)] = None
        except ValueError:
            dns[name] = None
    for raw in ip_addresses:
        try:
            ips[ipaddress.ip_address(raw.strip())] = None
        except ValueError as exc:
            raise CertificateError(f"not an IP address: {raw!r}") from exc
    return x509.SubjectAlternativeName([*map(x509.DNSName, dns), *map(x509.IPAddress, ips)])


def subject_alt_names(cert: x509.Certificate) -> list[str]:
    """DNS names and IP addresses (as strings) in the certificate's subjectAltName; ``[]`` if it has none."""
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return list(ext.get_values_for_type(x509.DNSName)) + [str(ip) for ip in ext.get_values_for_type(x509.IPAddress)]


def missing_names(cert: x509.Certificate, names: Iterable[str]) -> list[str]:
    """The entries of ``names`` (DNS names or IP literals) that the certificate's SAN does not cover exactly
    (:func:`_name_key`); wildcards are not expanded (admit never issues them)."""
    have = {_name_key(n) for n in subject_alt_names(cert)}
    return [name for name in names if _name_key(name) not in have]


def _check_days(days: float, what: str) -> None:
    if not days or days <= 0:
        raise CertificateError(f"{what} lifetime must be a positive number of days, got {days!r}")


def _key_usage(**usages: bool) -> x509.KeyUsage:
    """``keyUsage`` with the named usages set and every other one off."""
    names = ("digital_signature", "content_commitment", "key_encipherment", "data_encipherment", "key_agreement",
             "key_cert_sign", "crl_sign", "encipher_only", "decipher_only")
    return x509.KeyUsage(**{name: usages.get(name, False) for name in names})


def _issue(common_name: str, now: _dt.datetime, not_after: _dt.datetime,
           extensions: list[tuple[x509.ExtensionType, bool]], ca: CertifiedKey | None = None) -> CertifiedKey:
    """A new key and its certificate for the subject CN ``common_name``, valid from ``now - BACKDATE`` to
    ``not_after``, with a random serial, ``extensions`` (``(extension, critical)``) then the subject and authority key
    identifiers, signed by ``ca`` with SHA-256 (self-signed when ``None``)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    issuer_ski = ski if ca is None else ca.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject if ca is None else ca.cert.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - BACKDATE).not_valid_after(not_after))
    aki = x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(issuer_ski)
    for extension, critical in [*extensions, (ski, False), (aki, False)]:
        builder = builder.add_extension(extension, critical=critical)
    cert = builder.sign(key if ca is None else ca.key, hashes.SHA256())
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return CertifiedKey(cert, key, cert.public_bytes(serialization.Encoding.PEM), key_pem)


def generate_ca(common_name: str = "admit-ca", days: float = DEFAULT_CA_DAYS, clock: Clock = utcnow) -> CertifiedKey:
    """A self-signed CA valid from ``now - BACKDATE`` until ``days`` days from now, its subject CN ``common_name``
    truncated to 64 characters (RFC 5280 ub-common-name). Raises CertificateError for a non-positive ``days``."""
    _check_days(days, "CA")
    now = clock()
    return _issue(common_name[:64], now, now + _dt.timedelta(days=days), [
        (x509.BasicConstraints(ca=True, path_length=0), True),
        (_key_usage(key_cert_sign=True, crl_sign=True), True)])


def generate_serving_certificate(ca: CertifiedKey, service: str, namespace: str, dns_names: Iterable[str] = (),
                                 ip_addresses: Iterable[str] = (), days: float = DEFAULT_LEAF_DAYS,
                                 clock: Clock = utcnow, cluster_domain: str = "cluster.local") -> CertifiedKey:
    """A serving certificate for the webhook Service in front of admit, signed by ``ca``.

    SANs: :func:`service_dns_names` ``(service, namespace, cluster_domain)``, then the extra ``dns_names`` and
    ``ip_addresses`` (strings, IPv4 or IPv6; duplicates dropped; an IP literal in ``dns_names`` becomes an IP SAN).
    Subject CN ``<svc>.<ns>.svc`` (informational: clients check the SAN). Valid from ``now - BACKDATE`` until
    ``min(now + days, ca.notAfter)``.

    Raises:
        CertificateError: empty service/namespace, bad IP address, non-positive ``days``, or an expired CA.
    """
    _check_days(days, "serving certificate")
    now = clock()
    if ca.cert.not_valid_after_utc <= now:
        raise CertificateError(f"cannot issue from an expired CA ({describe(ca.cert)})")
    san = _subject_alt_name([*service_dns_names(service, namespace, cluster_domain), *dns_names], ip_addresses)
    cn = f"{service}.{namespace}.svc"
    not_after = min(now + _dt.timedelta(days=days), ca.cert.not_valid_after_utc)
    return _issue(cn if len(cn) <= 64 else service[:64], now, not_after, [
        (x509.BasicConstraints(ca=False, path_length=None), True),
        (_key_usage(digital_signature=True), True),
        (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False),
        (san, False)], ca)


def _pem(data: bytes | str, what: str) -> bytes:
    """``data`` as bytes; CertificateError naming ``what`` when it is empty."""
    data = data.encode() if isinstance(data, str) else data
    if not data.strip():
        raise CertificateError(f"{what} is empty")
    return data


def load_certificates(data: bytes | str, what: str = "certificate") -> list[x509.Certificate]:
    """Parse one or more PEM certificates (a file or a caBundle). Raises CertificateError naming ``what`` (the
    source: ``"tls.crt"``) when there is no certificate or a PEM block is truncated or corrupt."""
    data = _pem(data, what)
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise CertificateError(f"{what} is not a PEM certificate (no BEGIN CERTIFICATE line)")
    if data.count(b"-----BEGIN CERTIFICATE-----") != data.count(b"-----END CERTIFICATE-----"):
        raise CertificateError(f"{what} is truncated (a BEGIN CERTIFICATE line has no END line)")
    try:
        return x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise CertificateError(f"{what} is not valid PEM: {exc}") from None


def load_private_key(data: bytes | str, what: str = "private key") -> ec.EllipticCurvePrivateKey:
    """Parse an unencrypted PEM private key (PKCS#8, SEC1 ``EC PRIVATE KEY`` or PKCS#1 RSA). Raises CertificateError
    for an empty, truncated, encrypted or corrupt key, its message without key bytes."""
    data = _pem(data, what)
    if b"PRIVATE KEY-----" not in data:
        raise CertificateError(f"{what} is not a PEM private key")
    try:
        return serialization.load_pem_private_key(data, password=None)  # type: ignore[return-value]
    except Exception as exc:  # noqa: BLE001 - cryptography raises ValueError, TypeError, UnsupportedAlgorithm
        kind = type(exc).__name__
        raise CertificateError(f"{what} cannot be parsed ({kind}; truncated, encrypted or corrupt)") from None


def key_matches_certificate(cert: x509.Certificate, key: PrivateKeyTypes) -> bool:
    """True when ``key`` is the private key of ``cert``'s public key (cryptography >= 41 compares public keys)."""
    return cert.public_key() == key.public_key()


def is_signed_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    """True when ``cert`` names ``issuer`` as its issuer and carries a valid signature by ``issuer``'s key
    (``Certificate.verify_directly_issued_by``, RFC 5280 6.1.3)."""
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def load_pair(cert_pem: bytes | str, key_pem: bytes | str, cert_name: str = "tls.crt",
              key_name: str = "tls.key") -> CertifiedKey:
    """Parse a certificate (first PEM block; further blocks are intermediates) and its key, check they match.

    Raises:
        CertificateError: either part is corrupt/truncated/empty, or the key does not belong to the certificate;
            ``cert_name``/``key_name`` (file path, Secret key) name the sources.
    """
    certs = load_certificates(cert_pem, cert_name)
    key = load_private_key(key_pem, key_name)
    if not key_matches_certificate(certs[0], key):
        raise CertificateError(f"{key_name} does not match {cert_name} ({describe(certs[0])})")
    return CertifiedKey(certs[0], key, _pem(cert_pem, cert_name), _pem(key_pem, key_name))


def is_ca(cert: x509.Certificate) -> bool:
    """True when the certificate has ``basicConstraints CA:TRUE`` (RFC 5280 4.2.1.9)."""
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


def ca_problem(ca: CertifiedKey, clock: Clock = utcnow, what: str = "ca.crt") -> str:
    """Why ``ca`` cannot issue certificates now, in one line naming ``what``: not ``CA:TRUE`` (RFC 5280 4.2.1.9), or
    outside its validity window (:func:`validity_problem`); ``""`` when it can."""
    if not is_ca(ca.cert):
        return f"{what} is not a CA certificate (basicConstraints CA:TRUE missing)"
    return validity_problem(ca.cert, clock, what)


def validity_problem(cert: x509.Certificate, clock: Clock = utcnow, what: str = "certificate") -> str:
    """Why ``cert`` is not valid now, in one line naming ``what`` and the window, unless ``notBefore <= now <
    notAfter`` (RFC 5280 4.1.2.5); ``""`` inside it."""
    now = clock()
    if now < cert.not_valid_before_utc:
        return f"{what} is not valid before {iso(cert.not_valid_before_utc)} ({describe(cert)})"
    if now >= cert.not_valid_after_utc:
        return f"{what} expired at {iso(cert.not_valid_after_utc)} ({describe(cert)})"
    return ""


def rotation_due_at(cert: x509.Certificate, fraction: float = DEFAULT_ROTATION_FRACTION) -> _dt.datetime:
    """The instant after which less than ``fraction`` of the certificate's lifetime is left: ``notAfter - fraction *
    (notAfter - notBefore)``; by default about 243 days into a 365-day leaf, 6.7 years into a 10-year CA."""
    if not 0 < fraction < 1:
        raise ValueError(f"rotation fraction must be between 0 and 1, got {fraction!r}")
    return cert.not_valid_after_utc - (cert.not_valid_after_utc - cert.not_valid_before_utc) * fraction


def needs_rotation(cert: x509.Certificate, clock: Clock = utcnow, fraction: float = DEFAULT_ROTATION_FRACTION) -> bool:
    """True once ``now >= rotation_due_at(cert, fraction)`` (which includes an expired certificate)."""
    return clock() >= rotation_due_at(cert, fraction)


def is_expired(cert: x509.Certificate, clock: Clock = utcnow) -> bool:
    """True once ``now >= notAfter``."""
    return clock() >= cert.not_valid_after_utc


def fingerprint(cert: x509.Certificate) -> str:
    """SHA-256 over the DER certificate, hex."""
    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()


def iso(t: _dt.datetime) -> str:
    """``"2031-01-01T12:00:00Z"``: ``t`` in UTC to the second, as Kubernetes writes times (RFC 3339)."""
    return t.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def describe(cert: x509.Certificate) -> str:
    """One-line description for logs: subject, serial (hex), validity window, SHA-256 prefix. No key material."""
    try:
        subject = cert.subject.rfc4514_string()
    except Exception:  # noqa: BLE001
        subject = "?"
    return (f"subject={subject} serial={cert.serial_number:x} notBefore={iso(cert.not_valid_before_utc)} "
            f"notAfter={iso(cert.not_valid_after_utc)} sha256={fingerprint(cert)[:16]}")


def pem_bundle(certs: Iterable[x509.Certificate]) -> bytes:
    """The certificates as PEM, duplicates dropped, by notBefore then fingerprint: replicas that know the same CAs
    compute byte-identical ``caBundle`` values and never undo each other's patches."""
    unique = {fingerprint(c): c for c in certs}
    ordered = sorted(unique.values(), key=lambda c: (c.not_valid_before_utc, fingerprint(c)))
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in ordered)


def bundle_fingerprints(data: bytes | str | None) -> frozenset[str] | None:
    """The set of SHA-256 fingerprints in a PEM bundle; ``frozenset()`` for empty; ``None`` if unparsable."""
    if not data or not data.strip():
        return frozenset()
    try:
        return frozenset(fingerprint(c) for c in load_certificates(data, "caBundle"))
    except CertificateError:
        return None


def write_pem_files(directory: pathlib.Path | str, files: dict[str, tuple[bytes, bool]]) -> dict[str, pathlib.Path]:
    """Write ``files`` (``{file name: (content, is_private)}``) atomically into ``directory`` (created 0700 if
    missing), private ones mode 0600 and others 0644 whatever the umask. Returns ``{file name: path}``; raises OSError
    when the directory cannot be created or written."""
    directory = pathlib.Path(directory)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    out: dict[str, pathlib.Path] = {}
    for name, (content, private) in files.items():
        target = directory / name
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=directory)
        try:
            os.fchmod(fd, 0o600 if private else 0o644)
            with os.fdopen(fd, "wb") as fh:
                fh.write(content)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        out[name] = target
    return out


def write_development_certificates(directory: pathlib.Path, service: str = "admit", namespace: str = "default",
                                   dns_names: Sequence[str] = (), ip_addresses: Sequence[str] = ("127.0.0.1",),
                                   ca_days: int = DEFAULT_CA_DAYS, leaf_days: int = DEFAULT_LEAF_DAYS,
                                   clock: Clock = utcnow, cluster_domain: str = "cluster.local",
                                   force_new_ca: bool = False) -> dict[str, pathlib.Path]:
    """Write a CA (``ca.crt``, ``ca.key``) and a serving certificate (``tls.crt``, leaf only, ``tls.key``) as PEM into
    ``directory`` (``admit certs``); returns ``{file name: path}`` of the four.

    A CA already there is reused, so what trusts it (a ``caBundle``, a client's ``--cacert``) keeps verifying;
    ``force_new_ca`` replaces it. The leaf's SANs: :func:`service_dns_names`, ``localhost``, ``dns_names`` and
    ``ip_addresses`` (default ``127.0.0.1``: a local ``admit serve`` on loopback).

    Raises:
        CertificateError: bad names or lifetimes; a CA file in ``directory`` that cannot be reused (half of the pair
            missing, corrupt, expired, not a CA) unless ``force_new_ca``. OSError: the directory is not writable.
    """
    directory = pathlib.Path(directory)
    ca_crt, ca_key = directory / "ca.crt", directory / "ca.key"
    ca = None
    if not force_new_ca and (ca_crt.exists() or ca_key.exists()):
        try:
            ca = load_pair(ca_crt.read_bytes(), ca_key.read_bytes(), str(ca_crt), str(ca_key))
            if problem := ca_problem(ca, clock, str(ca_crt)):
                raise CertificateError(problem)
        except (OSError, CertificateError) as e:
            why = getattr(e, "strerror", None) or e
            raise CertificateError(f"{directory} holds a CA that cannot be reused ({why}); pass --force to replace it "
                                   "(certificates it issued stop verifying)") from None
    files: dict[str, tuple[bytes, bool]] = {}
    if ca is None:
        ca = generate_ca(days=ca_days, clock=clock)
        files = {"ca.crt": (ca.cert_pem, False), "ca.key": (ca.key_pem, True)}
    leaf = generate_serving_certificate(ca, service, namespace, ["localhost", *dns_names], ip_addresses, leaf_days,
                                        clock, cluster_domain)
    files.update({"tls.crt": (leaf.cert_pem, False), "tls.key": (leaf.key_pem, True)})
    return {"ca.crt": ca_crt, "ca.key": ca_key, **write_pem_files(directory, files)}
