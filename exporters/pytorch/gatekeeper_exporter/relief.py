"""The relief action: POST /v1/internal/empty_cache runs torch.cuda.empty_cache().

gatekeeper calls it as a relief hook when a pod's memory reads fragmented.
It is off unless the exporter is started with empty_cache=True (the vLLM
plugin: GATEKEEPER_EXPORTER_EMPTY_CACHE=1).

What it costs. empty_cache hands every wholly free cached segment back to
the driver with cudaFree, which waits for the whole device to finish its
queued work, while holding the allocator's lock: an engine step running at
that moment stalls until it is done, and the next allocations that need
memory go back to cudaMalloc. vLLM never calls it while serving (only at
start-up), and it frees nothing a tensor uses; it only helps when the
cache holds whole free segments that another allocation, or another
process, needs. Hence off by default, one call at a time, at most one per
min_interval, and never on an HTTP thread.

Who may call. With a token, a request must carry "Authorization: Bearer
<token>" (401 otherwise); without one, only loopback callers (403
otherwise). The GET endpoints stay open: the token guards the action only.

Everything that decides (access, refusals, the JSON) is a pure function;
Relief owns the worker thread and the one-at-a-time state.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from .reader import NotReady

logger = logging.getLogger("gatekeeper_exporter")

PATH = "/v1/internal/empty_cache"
THREAD_NAME = "gatekeeper-exporter-relief"
DEFAULT_MIN_INTERVAL = 1.0
DEFAULT_TIMEOUT = 10.0
DISABLED_MESSAGE = ("empty_cache is off: start the exporter with empty_cache=True, or set "
                    "GATEKEEPER_EXPORTER_EMPTY_CACHE=1 for the vLLM plugin\n")


@dataclass(frozen=True)
class Answer:
    """What the HTTP handler sends: a status, a JSON document and extra headers."""

    status: int
    doc: dict[str, Any]
    headers: tuple[tuple[str, str], ...] = ()


class Source(Protocol):
    """What the relief needs from a reader (TorchReader)."""

    def cuda(self) -> Any: ...

    def stats(self) -> dict[int, tuple[dict[str, Any] | None, str | None]]: ...


def valid_token(token: str) -> bool:
    """Whether token can be sent as a bearer token: visible ASCII, no spaces, not empty."""
    return bool(token) and all("!" <= c <= "~" for c in token)


def is_loopback(host: str) -> bool:
    """Whether a peer address is loopback: 127.0.0.0/8, ::1 or ::ffff:127.x (a zone is ignored)."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def bearer(authorization: str | None) -> str | None:
    """The credentials of an "Authorization: Bearer <token>" value (scheme in any case), or None."""
    if not authorization:
        return None
    scheme, _, value = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return value.strip() or None


def check_access(token: str | None, authorization: str | None, peer: str) -> Answer | None:
    """Returns the refusal for a caller, or None when it may call.

    token: the configured token or None. authorization: the request's
    Authorization header or None. peer: the caller's address.
    """
    if token is None:
        if is_loopback(peer):
            return None
        return Answer(403, {"error": "empty_cache: without a token only loopback callers may call it; "
                                     "configure a token (GATEKEEPER_EXPORTER_TOKEN) to call it from elsewhere"})
    given = bearer(authorization)
    if given is not None and hmac.compare_digest(given.encode(), token.encode()):
        return None
    return Answer(401, {"error": "empty_cache: missing or wrong bearer token"}, (("WWW-Authenticate", "Bearer"),))


def retry_after(wait: float) -> tuple[tuple[str, str], ...]:
    """The Retry-After header for a wait in seconds: whole seconds, at least 1."""
    return (("Retry-After", str(max(1, math.ceil(wait)))),)


def released_doc(before: Mapping[int, int], after: Mapping[int, int], duration: float) -> dict[str, Any]:
    """The 200 document: reserved bytes before and after per device, and what was released.

    A device's released bytes are max(before - after, 0): the engine may
    reserve more in between, which is not a negative release.
    """
    devices = []
    for d, was in before.items():
        now = after[d]
        devices.append({"gpu_id": str(d), "reserved_before_bytes": was, "reserved_after_bytes": now,
                        "released_bytes": max(was - now, 0)})
    return {"released_bytes": sum(x["released_bytes"] for x in devices),
            "duration_s": round(max(duration, 0.0), 6), "devices": devices}


def reserved(cuda: Any, device: int) -> int:
    """What the caching allocator holds on device: reserved_bytes.all.current, else memory_reserved."""
    value = (cuda.memory_stats(device) or {}).get("reserved_bytes.all.current")
    if value is None:
        value = cuda.memory_reserved(device)
    return int(value)


def empty_caches(source: Source, clock: Callable[[], float]) -> Answer:
    """Runs empty_cache for every device source reports and measures it. Never raises.

    PyTorch's empty_cache empties every device's cache whatever the current
    device; it is called once per device inside torch.cuda.device(d) so this
    thread only ever makes current a device the process uses (a new thread's
    current device is 0, and switching to a device creates a context there).
    Reserved bytes are read for every device before the first call and after
    the last, so each device's figure holds whichever call released it.
    """
    start = clock()
    step = "read"
    try:
        cuda = source.cuda()
        devices = list(source.stats())
        step = "memory_stats"
        before = {d: reserved(cuda, d) for d in devices}
        step = "empty_cache"
        for d in devices:
            with cuda.device(d):
                cuda.empty_cache()
        step = "memory_stats"
        after = {d: reserved(cuda, d) for d in devices}
    except NotReady as e:
        return Answer(503, {"error": f"empty_cache: {e}"})
    except Exception as e:  # noqa: BLE001 - never into the host
        return Answer(500, {"error": f"{step}: {e}"})
    return Answer(200, released_doc(before, after, clock() - start))


class _Job:
    """One admitted call. answer and abandoned are guarded by Relief._lock."""

    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.done = threading.Event()
        self.answer: Answer | None = None
        self.abandoned = False  # the handler stopped waiting (504)


class Relief:
    """Serves POST /v1/internal/empty_cache: one call at a time, on its own thread.

    Create one with Relief(source, clock, ...); start() starts the worker
    thread (a named daemon), stop() ends it. request() is what an HTTP
    thread calls: it checks access, admits the call or refuses it (429),
    hands it to the worker and waits up to timeout seconds (504 after).
    Safe for concurrent use: one lock guards the busy flag, the pending call
    and when the last one ended; no torch call runs under it.

    token: the bearer token, None for loopback callers only. min_interval:
    seconds from the end of one call to the start of the next, >= 0.
    timeout: seconds a request waits for the worker, > 0. clock: monotonic
    seconds (also measures duration_s). wait(event, seconds) -> bool waits
    for the worker (tests replace it; default Event.wait).
    """

    def __init__(self, source: Source, clock: Callable[[], float], token: str | None = None,
                 min_interval: float = DEFAULT_MIN_INTERVAL, timeout: float = DEFAULT_TIMEOUT,
                 wait: Callable[[threading.Event, float], bool] | None = None) -> None:
        if token is not None and not valid_token(token):
            raise ValueError("gatekeeper_exporter: token must be visible ASCII without spaces, not empty")
        if not (math.isfinite(min_interval) and min_interval >= 0):
            raise ValueError(f"gatekeeper_exporter: empty_cache_interval must be >= 0, got {min_interval!r}")
        if not (math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"gatekeeper_exporter: empty_cache_timeout must be > 0, got {timeout!r}")
        self._source = source
        self._clock = clock
        self._token = token
        self.min_interval = float(min_interval)
        self.timeout = float(timeout)
        self._wait = wait or threading.Event.wait
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # notified when a call is pending, ends, or on stop
        # Guarded by _lock:
        self._busy = False  # a call is pending or running
        self._pending: _Job | None = None
        self._last_end: float | None = None
        self._stopped = False
        self.calls = 0  # calls run (counted when they end)
        self._thread: threading.Thread | None = None

    @property
    def token_required(self) -> bool:
        """Whether callers need the bearer token (else: loopback only)."""
        return self._token is not None

    def request(self, peer: str, authorization: str | None) -> Answer:
        """Answers one POST from peer. Never raises."""
        denied = check_access(self._token, authorization, peer)
        if denied is not None:
            # Debug, not info: whoever reaches the port must not fill the host's log.
            logger.debug("gatekeeper_exporter: empty_cache refused %d for %s", denied.status, peer)
            return denied
        job = _Job(peer)
        with self._lock:
            refused = self._admit(job, self._clock())
        if refused is not None:
            logger.debug("gatekeeper_exporter: empty_cache refused %d for %s", refused.status, peer)
            return refused
        self._wait(job.done, self.timeout)
        with self._lock:
            if job.answer is not None:
                return job.answer
            job.abandoned = True
        return Answer(504, {"error": f"empty_cache: not done after {self.timeout:g} s; it may still finish, "
                                     "and calls are refused (429) until it does"})

    def _admit(self, job: _Job, now: float) -> Answer | None:
        """Hands job to the worker, or returns why not. Called with _lock held."""
        if self._stopped:
            return Answer(503, {"error": "empty_cache: the exporter is stopping"})
        if self._busy:
            return Answer(429, {"error": "empty_cache: a call is still running"}, retry_after(self.min_interval))
        if self._last_end is not None and now - self._last_end < self.min_interval:
            return Answer(429, {"error": f"empty_cache: at most one call every {self.min_interval:g} s"},
                          retry_after(self._last_end + self.min_interval - now))
        self._busy = True
        self._pending = job
        self._cond.notify_all()
        return None

    def wait_idle(self, timeout: float) -> bool:
        """Waits up to timeout seconds until no call is pending or running."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._busy, timeout)

    def start(self) -> None:
        """Starts the worker thread; idempotent."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stops the worker after the call it runs, if any; waits up to timeout seconds.

        A call admitted but not started is answered 503.
        """
        with self._cond:
            self._stopped = True
            pending, self._pending = self._pending, None
            if pending is not None:
                pending.answer = Answer(503, {"error": "empty_cache: the exporter is stopping"})
                self._busy = False
            self._cond.notify_all()
        if pending is not None:
            pending.done.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending is not None or self._stopped)
                if self._pending is None:
                    return
                job, self._pending = self._pending, None
            answer = Answer(500, {"error": "empty_cache: the relief thread failed"})
            try:
                answer = empty_caches(self._source, self._clock)
            finally:
                with self._cond:
                    self._busy = False
                    self._last_end = self._clock()
                    self.calls += 1
                    job.answer = answer
                    late = job.abandoned
                    self._cond.notify_all()
                job.done.set()
                _log(job.peer, answer, late)


def _log(peer: str, answer: Answer, late: bool) -> None:
    """One line per call run: info when it ran, warning when torch failed."""
    note = " (after the caller's timeout)" if late else ""
    if answer.status == 200:
        logger.info("gatekeeper_exporter: empty_cache for %s released %d bytes in %.3f s%s",
                    peer, answer.doc["released_bytes"], answer.doc["duration_s"], note)
    elif answer.status == 503:
        logger.info("gatekeeper_exporter: empty_cache for %s: nothing to do: %s%s", peer, answer.doc["error"], note)
    else:
        logger.warning("gatekeeper_exporter: empty_cache for %s failed: %s%s", peer, answer.doc["error"], note)
