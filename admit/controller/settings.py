"""The tunables of admit's controller (``ControllerSettings``), read by every part of it."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from .leader import default_identity

__all__ = ["ControllerSettings"]


@dataclass
class ControllerSettings:
    """Tunables (seconds). Defaults: the ``admit serve`` flags and client-go's leader-election values.

    ``watch_idle_timeout``: a watch silent (no event, no bookmark) this long is opened again. ``page_size``: list page
    (50, not client-go's 500: a page is parsed in one go on the loop that serves admissions; 100 stored Deployments
    are about 0.54 MB of JSON, 11 ms to parse with the stdlib and 7 ms with orjson on the development machine).
    ``repeat_window``: see ``guards.WriteGuards.repeating``. ``freeze_heap``: see ``manager.Manager._listed``.
    """

    orphan_grace_period: float = 60.0
    resync_period: float = 300.0
    lease_namespace: str = "default"
    lease_name: str = "admit-controller"
    identity: str = field(default_factory=default_identity)
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    workers: int = 4
    slow_retry: float = 60.0
    watch_backoff: tuple[float, float] = (0.8, 30.0)
    retry_backoff: tuple[float, float] = (0.5, 60.0)
    api_timeout: float = 10.0
    sync_timeout: float = 30.0
    watch_idle_timeout: float = 130.0
    page_size: int = 50
    repeat_window: float = 60.0
    freeze_heap: bool = True

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "ControllerSettings":
        """From ``admit serve`` flags (``--orphan-grace-period``, ``--resync-period``, ``--lease-name``,
        ``--lease-namespace`` (default ``--namespace``))."""
        return cls(
            orphan_grace_period=float(getattr(args, "orphan_grace_period", 60.0)),
            resync_period=float(getattr(args, "resync_period", 300.0)),
            lease_name=getattr(args, "lease_name", None) or "admit-controller",
            lease_namespace=getattr(args, "lease_namespace", None) or getattr(args, "namespace", None) or "default",
        )
