"""Server-side TLS for ``admit serve``: one long-lived :class:`ssl.SSLContext` whose certificate can change at run time.

The server is started once with ``TLSProvider.ssl_context``; a new pair (a file rewritten by cert-manager, a rotation
in self-managed mode) is loaded into a fresh context with the same settings, and the long-lived context's
``sni_callback`` (run by OpenSSL on every ClientHello, with or without SNI) moves each handshake onto the newest one:
established connections keep theirs, nothing restarts. Re-loading into the one context is not enough: OpenSSL keeps
one certificate per key algorithm in a context, so after an RSA to ECDSA switch the old one would still be offered
(checked against OpenSSL 3.0). docs/certificates.md says what an operator sees. The sources of the settings:

- TLS 1.2 minimum (kube-apiserver's Go client negotiates TLS 1.3 or 1.2; RFC 8996 deprecates 1.0/1.1); TLS 1.2
  suites ECDHE with AES-GCM or ChaCha20-Poly1305 only (Mozilla "intermediate"); TLS 1.3's are all AEAD (OpenSSL's
  defaults). No compression (CRIME), no renegotiation; ALPN ``http/1.1`` (aiohttp's server speaks HTTP/1.1).
- A pair is validated before it is loaded (:mod:`admit.tls.certs`); one that fails keeps the previous one serving.
  The key is never logged, and reaches OpenSSL through an anonymous in-memory file (``memfd_create``) where the
  platform has one, else a private 0700 temporary directory (a read-only root filesystem works).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pathlib
import shutil
import ssl
import tempfile
from collections.abc import Iterator

from . import certs
from ..eventloop import cancel
from ..observability import metrics
from .certs import CertificateError, CertifiedKey, Clock, utcnow

log = logging.getLogger("admit.tls")

TLS12_CIPHERS = ":".join(["ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256",
                          "ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-RSA-AES256-GCM-SHA384",
                          "ECDHE-ECDSA-CHACHA20-POLY1305", "ECDHE-RSA-CHACHA20-POLY1305"])  # Mozilla intermediate v5.7


def create_server_ssl_context() -> ssl.SSLContext:
    """A server ``SSLContext`` with the module docstring's settings, no client certificate asked, no certificate."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(TLS12_CIPHERS)
    ctx.options |= ssl.OP_NO_COMPRESSION | getattr(ssl, "OP_NO_RENEGOTIATION", 0)
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


@contextlib.contextmanager
def _pem_path(pair: CertifiedKey) -> Iterator[str]:
    """A path OpenSSL can read the pair from, key first (``load_cert_chain`` takes the first key and the certificates
    of one file), valid inside the ``with`` block only."""
    pem = pair.key_pem + b"\n" + pair.cert_pem
    memfd_create = getattr(os, "memfd_create", None)
    if memfd_create is not None and os.path.isdir("/proc/self/fd"):
        fd = memfd_create("admit-tls", getattr(os, "MFD_CLOEXEC", 0))
        try:
            os.write(fd, pem)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    tmp = tempfile.mkdtemp(prefix="admit-tls-")  # mode 0700
    try:
        yield str(certs.write_pem_files(tmp, {"tls.pem": (pem, True)})["tls.pem"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class TLSProvider:
    """A serving certificate that can change while the server runs; subclasses obtain pairs and :meth:`install` them.

    Use: ``await provider.start()`` (raises if no certificate can be obtained), then ``web.TCPSite(runner, host, port,
    ssl_context=provider.ssl_context)`` (one context for the provider's lifetime); ``provider.ready()`` in ``/readyz``
    (``provider.reason()`` says why not); ``await provider.stop()`` on shutdown. ``pair`` is the pair served
    (``None`` before the first load).
    """

    def __init__(self, *, clock: Clock = utcnow) -> None:
        self.clock = clock
        self.ssl_context: ssl.SSLContext = create_server_ssl_context()
        self.ssl_context.sni_callback = self._select_context
        self._active: ssl.SSLContext | None = None
        self.pair: CertifiedKey | None = None
        self._task: asyncio.Task[None] | None = None  # background work of a subclass, cancelled by stop()

    def _select_context(self, sslobj: ssl.SSLObject, _server_name: str | None, _ctx: ssl.SSLContext) -> None:
        if self._active is not None:
            sslobj.context = self._active

    def install(self, pair: CertifiedKey) -> None:
        """Serve ``pair`` from the next handshake on (established connections keep theirs), in a new context of
        :func:`create_server_ssl_context`.

        Raises:
            CertificateError: OpenSSL refused the pair (the message names the certificate, never the key); the
                previous pair keeps serving.
        """
        ctx = create_server_ssl_context()
        try:
            with _pem_path(pair) as path:
                ctx.load_cert_chain(path)
        except (ssl.SSLError, OSError) as exc:
            raise CertificateError(f"OpenSSL refused the pair ({certs.describe(pair.cert)}): "
                                   f"{exc.__class__.__name__}") from None
        self._active = ctx
        self.pair = pair
        log.info("serving certificate loaded: %s", certs.describe(pair.cert))
        metrics.certificate("serving", pair.cert.not_valid_after_utc.timestamp())

    async def start(self) -> None:
        """Obtain and load the first pair, then start background work. Raises on failure (subclasses)."""
        raise NotImplementedError

    async def stop(self) -> None:
        """Stop the background task (``self._task``), if any. The context keeps serving the last pair."""
        task, self._task = self._task, None
        await cancel([task])

    def reason(self) -> str:
        """Why the provider is not ready (one line), or ``""`` when it is."""
        if self.pair is None:
            return "no serving certificate loaded"
        return certs.validity_problem(self.pair.cert, self.clock, "serving certificate")

    def ready(self) -> bool:
        """True when a certificate valid now is loaded (and, in subclasses, their own conditions hold)."""
        return self.reason() == ""


class FileTLSProvider(TLSProvider):
    """Serve the pair in ``cert_file`` (PEM, then any intermediates) and ``key_file`` (unencrypted PEM), reloaded
    when either changes (cert-manager mode; docs/certificates.md, "File mode").

    Every ``poll_interval`` seconds both files are read; new contents that hold a good pair are served from the next
    handshake. Bad contents are logged (once, at ERROR) only when still there at the next poll (a writer that replaces
    the files one at a time passes through a mismatched state); the last good pair keeps serving. A new certificate
    outside its validity window does not replace a good one, but is loaded when nothing else is; one due for renewal
    logs one warning.
    """

    def __init__(self, cert_file: str | os.PathLike[str], key_file: str | os.PathLike[str], poll_interval: float = 2.0,
                 *, clock: Clock = utcnow) -> None:
        super().__init__(clock=clock)
        self.cert_file = pathlib.Path(cert_file)
        self.key_file = pathlib.Path(key_file)
        self.poll_interval = poll_interval
        self._seen: tuple[bytes, bytes] | None = None  # the last contents acted upon (loaded, or error logged)
        self._pending: tuple[bytes, bytes] | None = None  # bad contents seen once, not yet reported
        self._last_error = ""
        self._warned_renewal: str | None = None

    def reload(self, *, settle: bool = True) -> bool:
        """Check the files once; returns True when a new good pair was loaded. With ``settle`` (the polling loop) bad
        contents are reported only if unchanged since the previous call; without (first load), at once."""
        try:
            contents = (self.cert_file.read_bytes(), self.key_file.read_bytes())
        except OSError as exc:
            return self._bad(f"cannot read {exc.filename}: {exc.strerror}", (str(exc).encode(), b""), settle)
        if contents == self._seen:
            self._pending = None
            self._warn_if_due()
            return False
        try:
            pair = certs.load_pair(*contents, str(self.cert_file), str(self.key_file))
            now_problem = certs.validity_problem(pair.cert, self.clock, str(self.cert_file))
            if now_problem and self.pair is not None and not certs.is_expired(self.pair.cert, self.clock):
                return self._bad(f"{now_problem}; keeping the current certificate", contents, settle)
            self.install(pair)
        except CertificateError as exc:
            return self._bad(str(exc), contents, settle)
        if now_problem:
            log.error("%s", now_problem)
        self._seen, self._pending, self._last_error = contents, None, ""
        self._warn_if_due()
        return True

    def _bad(self, message: str, contents: tuple[bytes, bytes], settle: bool) -> bool:
        if settle and self._pending != contents and self._seen != contents:
            self._pending = contents  # maybe a writer half-way through; look again next poll
            log.debug("TLS files changed but are not usable yet (%s); checking again", message)
            return False
        if self._seen != contents:
            keeping = f"; still serving {certs.describe(self.pair.cert)}" if self.pair is not None else ""
            log.error("TLS reload failed: %s%s", message, keeping)
            self._seen, self._pending, self._last_error = contents, None, message
        return False

    def _warn_if_due(self) -> None:
        pair = self.pair
        if pair and self._warned_renewal != pair.fingerprint and certs.needs_rotation(pair.cert, self.clock):
            self._warned_renewal = pair.fingerprint
            log.warning("serving certificate %s is due for renewal (expires %s); the issuer has not replaced %s",
                        certs.describe(pair.cert), pair.cert.not_valid_after_utc.isoformat(), self.cert_file)

    async def start(self) -> None:
        """Load the pair and start polling. Raises CertificateError, saying why, when the files give no usable pair."""
        self.reload(settle=False)
        if self.pair is None:
            raise CertificateError(f"no usable TLS pair in {self.cert_file} / {self.key_file}: "
                                   f"{self._last_error or 'unknown error'}")
        if self._task is None:
            self._task = asyncio.create_task(self._poll(), name="admit-tls-file-reload")

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval)
            try:
                self.reload()
            except Exception:  # noqa: BLE001 - the loop must survive anything
                log.exception("unexpected error while checking %s", self.cert_file)

    def reason(self) -> str:
        """``""`` when a valid certificate is loaded; otherwise the reason, including the last load error."""
        base = super().reason()
        if base and self._last_error and self.pair is None:
            return f"{base}: {self._last_error}"
        return base
