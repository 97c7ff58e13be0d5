"""The bounded load generator: a fixed schedule of completion requests, sent on loopback.

schedule() is pure: the same LoadSpec (seed included) gives the same
arrivals, so the unprotected run and the run through gatekeeper get the same
requests at the same offsets. LoadRunner sends them at their times, one
thread per request in flight (at most max_outstanding), and counts every
request in exactly one outcome: served (200), refused (429/503 that
gatekeeper answered itself: X-Gatekeeper-Reason), failed (any other answer,
a connection error or a client timeout) or, at the end, unfinished. No
request is retried.
"""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass
from typing import Any

UPSTREAM_REASONS = ("upstream_error", "upstream_timeout")


@dataclass(frozen=True)
class LoadSpec:
    """A load, fixed up front. Shares are probabilities per request; ranges are inclusive token counts."""

    seed: int
    duration_s: float
    base_qps: float
    bursts: tuple[tuple[float, float, float], ...]  # (start_s, length_s, qps)
    prompt_mix: tuple[tuple[float, int, int], ...]  # (share, lo, hi) of prompt tokens
    max_tokens: tuple[int, int]
    top_p_share: float
    n_mix: tuple[tuple[int, float], ...]  # (n, share)
    prompt_logprobs_share: float
    timeout_s: float = 60.0
    max_outstanding: int = 2048

    def rate_at(self, t: float) -> float:
        for start, length, qps in self.bursts:
            if start <= t < start + length:
                return qps
        return self.base_qps


@dataclass(frozen=True)
class Arrival:
    index: int
    at_s: float
    prompt_tokens: int
    max_tokens: int
    n: int
    top_p: bool
    prompt_logprobs: bool


def schedule(spec: LoadSpec) -> list[Arrival]:
    """The arrivals: a Poisson process at rate_at(t) (thinning), each request drawn from the mixes."""
    rng = random.Random(spec.seed)
    peak = max([spec.base_qps] + [b[2] for b in spec.bursts])
    out: list[Arrival] = []
    t = 0.0
    for _ in range(int(peak * spec.duration_s * 3) + 100):
        t += rng.expovariate(peak)
        if t >= spec.duration_s:
            break
        if rng.random() >= spec.rate_at(t) / peak:
            continue
        out.append(_draw(rng, spec, len(out), t))
    return out


def _draw(rng: random.Random, spec: LoadSpec, index: int, t: float) -> Arrival:
    u, acc = rng.random(), 0.0
    lo, hi = spec.prompt_mix[-1][1:]
    for share, a, b in spec.prompt_mix:
        acc += share
        if u < acc:
            lo, hi = a, b
            break
    prompt = rng.randint(lo, hi)
    max_tokens = rng.randint(*spec.max_tokens)
    top_p = rng.random() < spec.top_p_share
    u, n, acc = rng.random(), 1, 0.0
    for k, share in spec.n_mix:
        acc += share
        if u < acc:
            n = k
            break
    pl = rng.random() < spec.prompt_logprobs_share
    return Arrival(index, round(t, 4), prompt, max_tokens, n, top_p, pl)


def body(a: Arrival, model: str, vocab: int) -> dict[str, Any]:
    """The request body: the prompt as token ids (exact for gatekeeper's estimate and the server alike)."""
    doc: dict[str, Any] = {"model": model, "max_tokens": a.max_tokens, "temperature": 1.0,
                           "prompt": [1 + (a.index * 7919 + k * 31) % (vocab - 1) for k in range(a.prompt_tokens)]}
    if a.n > 1:
        doc["n"] = a.n
    if a.top_p:
        doc["top_p"] = 0.9
    if a.prompt_logprobs:
        doc["prompt_logprobs"] = 1
    return doc


def classify(status: int | None, reason: str | None, err: str | None) -> tuple[str, str]:
    """(outcome, detail) of one answer: served, refused (by gatekeeper) or failed."""
    if status == 200:
        return "served", ""
    if status in (429, 503) and reason and reason not in UPSTREAM_REASONS:
        return "refused", reason
    if status is None:
        return "failed", err or "connection"
    return "failed", f"{status} {reason}" if reason else str(status)


class LoadRunner:
    """Sends arrivals to url at t0 + at_s. Create one, start(t0), stop(), wait_idle(). Safe for concurrent use."""

    def __init__(self, url: str, arrivals: list[Arrival], model: str, vocab: int, spec: LoadSpec) -> None:
        self.url, self.arrivals, self.model, self.vocab, self.spec = url, arrivals, model, vocab, spec
        self._lock = threading.Lock()
        # Guarded by _lock:
        self.sent = 0
        self.in_flight = 0
        self.outcomes: Counter[str] = Counter()
        self.details: Counter[str] = Counter()
        self.latencies: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._slots = threading.BoundedSemaphore(spec.max_outstanding)

    def start(self, t0: float) -> None:
        self._thread = threading.Thread(target=self._dispatch, args=(t0,), name="load-dispatch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Sends nothing more; requests in flight go on."""
        self._stop.set()

    def dispatched(self) -> bool:
        """Whether every arrival was sent (or the runner was stopped)."""
        return self._thread is not None and not self._thread.is_alive()

    def wait_idle(self, timeout: float) -> bool:
        end = time.monotonic() + timeout
        for _ in range(int(timeout / 0.05) + 1):
            with self._lock:
                if self.in_flight == 0:
                    return True
            if time.monotonic() >= end:
                break
            time.sleep(0.05)
        return False

    def counts(self) -> dict[str, Any]:
        with self._lock:
            return {"sent": self.sent, "served": self.outcomes["served"], "refused": self.outcomes["refused"],
                    "failed": self.outcomes["failed"], "not_sent": self.outcomes["not_sent"],
                    "in_flight": self.in_flight, "details": dict(self.details)}

    def _dispatch(self, t0: float) -> None:
        for a in self.arrivals:
            if self._stop.wait(max(0.0, t0 + a.at_s - time.monotonic())):
                return
            if not self._slots.acquire(blocking=False):
                with self._lock:
                    self.outcomes["not_sent"] += 1
                continue
            with self._lock:
                self.sent += 1
                self.in_flight += 1
            threading.Thread(target=self._send, args=(a,), name=f"load-{a.index}", daemon=True).start()

    def _send(self, a: Arrival) -> None:
        start = time.monotonic()
        status = reason = err = None
        try:
            data = json.dumps(body(a, self.model, self.vocab)).encode()
            req = urllib.request.Request(self.url, data=data, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=self.spec.timeout_s) as r:
                r.read()
                status = r.status
        except urllib.error.HTTPError as e:
            status, reason = e.code, e.headers.get("X-Gatekeeper-Reason")
            e.read()
        except Exception as e:  # noqa: BLE001 - a connection error or a timeout is a failure
            err = "timeout" if "timed out" in str(e) else "connection"
        outcome, detail = classify(status, reason, err)
        with self._lock:
            self.in_flight -= 1
            self.outcomes[outcome] += 1
            self.details[f"{outcome}: {detail}" if detail else outcome] += 1
            if outcome == "served":
                self.latencies.append(time.monotonic() - start)
        self._slots.release()
