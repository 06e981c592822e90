"""The key loop every gang controller runs: a work queue of ``(namespace, name)`` keys, the reconcile of one key with
its error handling, the retry, and the once-per-change report. See :class:`KeyLoop`.
"""

from __future__ import annotations

import logging
import random
from typing import Awaitable, Callable

from ..kube.client import KubeError
from .leader import NotLeader
from .settings import ControllerSettings
from .workqueue import WorkQueue

__all__ = ["Key", "KeyLoop"]

Key = tuple[str, str]
"""``(namespace, name)``: a PodGroup's, or the name every object of a native gang shares."""

THROTTLED_QUIET_FAILURES = 2
"""Throttled failures in a row of one key retried without a report (:meth:`KeyLoop.quiet`): the third, throttling
that outlasted the retries of three reconciles (``kube.client.call_with_retries``), is reported."""


class KeyLoop:
    """One controller's work queue and what happens around one key (client-go's ``processNextWorkItem``).

    :meth:`process` reconciles one key taken from :attr:`queue` and marks it done; what the reconcile raises decides
    what happens next:

    - nothing: the key's failure count is forgotten and a retry reported for it is resolved (a new failure is
      logged again);
    - ``leader.NotLeader`` (a write found the Lease not held): the key is looked at again after
      ``settings.retry_period`` while ``leading()`` still says so (a late renewal can keep this replica leading,
      and then nothing else would look at the key again); a replica that did lose the Lease clears its queue;
    - ``kube.KubeError``: :meth:`retry` with the error's message (used as is when it already names its subject,
      ``"cannot create PodGroup ..."``; else after ``subject(key)``), not before its ``Retry-After``; a throttled
      error (``KubeError.throttled``) is reported only once it persists (:meth:`quiet`);
    - any other exception: logged with its traceback as a bug, then :meth:`retry` (one bad object must not stop the
      controller).

    Args:
        reconcile: ``await reconcile(key)``, the controller's work for one key.
        settings: ``settings.ControllerSettings`` (``retry_backoff``, ``retry_period``), read at each use.
        leading: whether this replica is leading (keys are queued again only then).
        subject: ``subject(key)`` names the key in messages (``"PodGroup team-a/web"``).
        log: the controller's logger; reports and the tracebacks go there.
    """

    def __init__(self, reconcile: Callable[[Key], Awaitable[None]], settings: ControllerSettings, *,
                 leading: Callable[[], bool], subject: Callable[[Key], str], log: logging.Logger) -> None:
        self.queue = WorkQueue()
        self._reconcile = reconcile
        self._settings = settings
        self._leading = leading
        self._subject = subject
        self._log = log
        #: Failures in a row per key (the backoff's exponent); forgotten when the key reconciles.
        self.failures: dict[Key, int] = {}
        #: What was last reported per key and topic (:meth:`report`).
        self.reported: dict[Key, dict[str, str]] = {}

    # ------------------------------------------------------------------ the work

    async def worker(self) -> None:
        """Take keys and :meth:`process` them, forever (cancel the task to stop)."""
        while True:
            await self.process(await self.queue.get())

    async def process(self, key: Key) -> None:
        """Reconcile ``key`` with the error handling of the class docstring; raises only ``CancelledError``."""
        try:
            await self._reconcile(key)
            if self.failures.pop(key, None) is not None:
                self.resolved(key, "retry")
        except NotLeader:
            if self._leading():
                self.queue.add_after(key, self._settings.retry_period)
        except KubeError as e:
            self.retry(key, e.message if e.message.startswith("cannot ") else f"{self._subject(key)}: {e.message}",
                       quiet=self.quiet(key, e), at_least=e.retry_after or 0.0)
        except Exception as e:  # noqa: BLE001 - one bad object must not stop the controller
            self._log.exception("reconcile of %s failed", self._subject(key))
            self.retry(key, f"{self._subject(key)}: internal error ({type(e).__name__})")
        finally:
            self.queue.done(key)

    def backoff(self, key: Key) -> float:
        """Count one more failure for ``key`` and return the seconds to wait before the next try: ``retry_backoff``
        ``(base, maximum)``, ``base`` doubling per failure in a row up to ``maximum``, times a jitter of 0.75 to 1
        (so keys that failed together do not come back together)."""
        n = self.failures.get(key, 0) + 1
        self.failures[key] = n
        base, maximum = self._settings.retry_backoff
        return float(min(maximum, base * 2 ** (n - 1)) * (0.75 + random.random() / 4))

    def quiet(self, key: Key, error: KubeError) -> bool:
        """True while a failure of ``key`` is still transient: ``error`` is throttled (``KubeError.throttled``) and
        ``key`` failed fewer than :data:`THROTTLED_QUIET_FAILURES` times in a row before it (:meth:`retry` then logs
        it at INFO, with no Warning Event)."""
        return error.throttled and self.failures.get(key, 0) < THROTTLED_QUIET_FAILURES

    def retry(self, key: Key, why: str, *, quiet: bool = False, at_least: float = 0.0) -> None:
        """Report ``why`` (topic ``"retry"``, once per change; with ``quiet``, an INFO line that is not recorded, so
        the failure is reported when it persists) and queue ``key`` again after :meth:`backoff`, or ``at_least``
        seconds (the server's ``Retry-After``) when longer, while leading."""
        delay = max(self.backoff(key), at_least)
        base, maximum = self._settings.retry_backoff
        message = f"{why}; retrying with backoff ({base:g}s doubling to {maximum:g}s)"
        if quiet:
            self._log.info("%s (throttled by the API server: reported if it persists)", message)
        else:
            self.report(key, "retry", message)
        if self._leading():
            self.queue.add_after(key, delay)

    def reset(self) -> None:
        """Stopped leading: drop every queued and delayed key and the failure counts (the reports stay, so a new
        term does not repeat what was said)."""
        self.queue.clear()
        self.failures.clear()

    # ------------------------------------------------------------------ reporting

    def report(self, key: Key, topic: str, message: str, level: int = logging.WARNING) -> bool:
        """Log ``message`` at ``level`` unless it is what was last reported for ``(key, topic)``; True when logged
        (the caller then records its Event, so Events are once per change too)."""
        if not self.record(key, topic, message):
            return False
        self._log.log(level, "%s", message)
        return True

    def record(self, key: Key, topic: str, message: str) -> bool:
        """:meth:`report` without the log line (the message is logged elsewhere, as a failed write's is by
        :meth:`retry`); True when ``message`` is new for ``(key, topic)``."""
        topics = self.reported.setdefault(key, {})
        if topics.get(topic) == message:
            return False
        topics[topic] = message
        return True

    def resolved(self, key: Key, topic: str) -> None:
        """``(key, topic)`` is fixed: its next report is logged again."""
        topics = self.reported.get(key)
        if topics is not None:
            topics.pop(topic, None)
            if not topics:
                del self.reported[key]

    def topics(self, key: Key) -> list[str]:
        """The topics reported for ``key`` and not resolved since."""
        return list(self.reported.get(key, ()))

    def forget(self, key: Key) -> None:
        """Resolve every topic of ``key``."""
        self.reported.pop(key, None)
