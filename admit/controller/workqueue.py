"""The controller's work queue (:class:`WorkQueue`)."""

from __future__ import annotations

import asyncio
from collections import deque

__all__ = ["WorkQueue", "GroupKey"]

GroupKey = tuple[str, str]  # (namespace, PodGroup name)


class WorkQueue:
    """client-go style work queue (``util/workqueue``): a key is queued once, never processed by two workers at once,
    and re-queued if it was added while being processed; ``add_after`` delays an add (keeps the earliest pending
    delay).

    :meth:`get` always gives the event loop back before it hands out a key: else a worker whose reconciles need no
    API call (a resync's usual case) would drain 20,000 keys in one go while admissions wait on the same loop.
    """

    def __init__(self) -> None:
        self._queue: deque[GroupKey] = deque()
        self._queued: set[GroupKey] = set()
        self._processing: set[GroupKey] = set()
        self._dirty: set[GroupKey] = set()
        self._timers: dict[GroupKey, asyncio.TimerHandle] = {}
        self._ready = asyncio.Event()

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def idle(self) -> bool:
        """No key is queued or being processed (keys may still wait on a timer of :meth:`add_after`)."""
        return not self._queue and not self._processing

    def add(self, key: GroupKey) -> None:
        if key in self._processing:
            self._dirty.add(key)
            return
        if key in self._queued:
            return
        self._queued.add(key)
        self._queue.append(key)
        self._ready.set()

    def add_after(self, key: GroupKey, delay: float) -> None:
        loop = asyncio.get_running_loop()
        when = loop.time() + max(0.0, delay)
        timer = self._timers.get(key)
        if timer is not None and not timer.cancelled() and timer.when() <= when:
            return
        if timer is not None:
            timer.cancel()
        self._timers[key] = loop.call_at(when, self._fire, key)

    def _fire(self, key: GroupKey) -> None:
        self._timers.pop(key, None)
        self.add(key)

    async def get(self) -> GroupKey:
        """The next key (waits for one); mark it :meth:`done` when finished."""
        await asyncio.sleep(0)
        while not self._queue:
            self._ready.clear()
            await self._ready.wait()
        key = self._queue.popleft()
        self._queued.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: GroupKey) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    def clear(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._queue.clear()
        self._queued.clear()
        self._dirty.clear()
        self._processing.clear()
