"""Shared test helpers: a fake clock, an exporter on loopback, HTTP GETs and POSTs."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any
from unittest import mock

import gatekeeper_exporter

WAIT = 10.0  # seconds a test waits for a thread or a socket before it fails
CONF_VARS = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")


class FakeClock:
    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def clean_env() -> mock._patch:
    """Patches os.environ without the allocator configuration variables."""
    env = {k: v for k, v in os.environ.items() if k not in CONF_VARS}
    return mock.patch.dict(os.environ, env, clear=True)


def start(testcase: Any, cuda: Any, clock: FakeClock | None = None, interval: float = 3600, **kw: Any):
    """Starts an exporter on 127.0.0.1:0 and waits for its first snapshot."""
    exporter = gatekeeper_exporter.start(port=0, host="127.0.0.1", interval=interval, clock=clock, **kw)
    testcase.addCleanup(exporter.stop, WAIT)
    if cuda is not None and cuda.initialized and cuda.backend == "native":
        testcase.assertTrue(exporter.sampler.wait_first(WAIT), "no first snapshot attempt")
    return exporter


def get(url: str) -> tuple[int, str, bytes]:
    """GET url: (status, content type, body)."""
    try:
        with urllib.request.urlopen(url, timeout=WAIT) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read()


def post(url: str, headers: dict[str, str] | None = None, body: bytes = b"",
         method: str = "POST") -> tuple[int, Any, bytes]:
    """POST (or method) url: (status, response headers, body)."""
    req = urllib.request.Request(url, data=body if method == "POST" else None, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=WAIT) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def get_json(url: str) -> dict[str, Any]:
    status, ctype, body = get(url)
    assert status == 200 and ctype == "application/json", (status, ctype)
    return json.loads(body)
