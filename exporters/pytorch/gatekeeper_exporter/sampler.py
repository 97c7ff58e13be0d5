"""The snapshot sampler: the only caller of memory_snapshot, on its own thread.

A snapshot holds the allocator's lock (and the GIL) while it copies every
block, so it never runs on a request. The sampler takes one at most every
``interval`` seconds, and only when a device's inactive_split_bytes or segment
count changed since the last one; requests read the cached summaries.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from .figures import SnapshotSummary, summarize
from .reader import NotReady

logger = logging.getLogger("gatekeeper_exporter")

THREAD_NAME = "gatekeeper-exporter-sampler"


class Source(Protocol):
    """What the sampler needs from a reader."""

    def backend(self) -> str | None: ...

    def change_keys(self) -> dict[int, tuple[int, int] | None]: ...

    def snapshot(self) -> list: ...


class Sampler:
    """Takes rate-limited memory snapshots and keeps their summaries.

    Create one with Sampler(reader, interval, clock); call start() for the
    background thread, or tick() to drive it by hand (tests). Safe for
    concurrent use: one lock guards the summaries, the change keys and the
    last error; no torch call runs under it.
    """

    def __init__(self, source: Source, interval: float = 1.0,
                 clock: Callable[[], float] | None = None) -> None:
        if not interval > 0:
            raise ValueError(f"gatekeeper_exporter: interval must be > 0, got {interval!r}")
        self._source = source
        self.interval = float(interval)
        self._clock = clock or time.monotonic
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # notified after every attempt
        # Guarded by _lock:
        self._summaries: dict[int, SnapshotSummary] = {}
        self._keys: dict[int, tuple[int, int] | None] = {}
        self._last_at: float | None = None
        self._error: str | None = None
        self.snapshots_taken = 0
        # Thread control.
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def summary(self, device: int) -> SnapshotSummary | None:
        """Returns the latest summary for device, or None before the first snapshot."""
        with self._lock:
            return self._summaries.get(device)

    def wait_first(self, timeout: float) -> bool:
        """Waits up to timeout seconds for the first snapshot attempt to end.

        Returns True once a snapshot was taken or an attempt failed (error()).
        """
        with self._changed:
            return self._changed.wait_for(lambda: self.snapshots_taken > 0 or self._error is not None, timeout)

    def error(self) -> str | None:
        """Returns why the latest snapshot attempt failed, or None."""
        with self._lock:
            return self._error

    def tick(self) -> bool:
        """Runs one round: a snapshot if one is due and something changed.

        Returns whether a snapshot was taken. Never raises: a failure is kept
        for error() and the previous summaries stay (their age grows).
        """
        now = self._clock()
        with self._lock:
            if self._last_at is not None and now - self._last_at < self.interval:
                return False
            known = dict(self._keys)
        try:
            if self._source.backend() == "cudaMallocAsync":
                return False  # no caching-allocator segments to walk
            keys = self._source.change_keys()
            if all(d in known and known[d] == k for d, k in keys.items()):
                return False
            segments = self._source.snapshot()
            taken = self._clock()
            summaries = {d: summarize(segments, d, taken) for d in keys}
        except NotReady:
            return False
        except Exception as e:  # noqa: BLE001 - never into the host
            with self._lock:
                self._error = f"memory_snapshot: {e}"
                self._last_at = now
                self._changed.notify_all()
            logger.debug("gatekeeper_exporter: snapshot failed", exc_info=True)
            return False
        with self._lock:
            self._summaries.update(summaries)
            self._keys.update(keys)
            self._last_at = taken
            self._error = None
            self.snapshots_taken += 1
            self._changed.notify_all()
        return True

    def start(self) -> None:
        """Starts the background thread (a named daemon); idempotent."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stops the background thread and waits up to timeout seconds for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.tick()
            if self._stop.wait(self.interval):
                return
