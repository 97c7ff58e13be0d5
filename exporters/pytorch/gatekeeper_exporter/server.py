"""Serving HTTP: GET /memory_blocks (JSON), GET /metrics (Prometheus text) and,
when turned on, POST /v1/internal/empty_cache (relief.py).

A standard-library ThreadingHTTPServer on a named daemon thread. A GET
reads memory_stats and mem_get_info (cheap counters) and the sampler's cached
snapshot summary; it never takes a snapshot itself. The POST only routes:
relief.py decides and its own thread calls torch.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from . import prom, relief
from .figures import compute_block
from .reader import NotReady, TorchReader
from .relief import Relief
from .sampler import Sampler

logger = logging.getLogger("gatekeeper_exporter")

THREAD_NAME = "gatekeeper-exporter-http"
JSON_PATH = "/memory_blocks"
METRICS_PATH = "/metrics"
MAX_DISCARDED_BODY = 64 << 10  # a POST body is read and dropped up to this; a larger one closes the connection


class Exporter:
    """A running exporter: the HTTP server, the snapshot sampler and, when
    empty_cache is on, the relief thread.

    Create one with start(). port is the bound port (useful with port 0),
    url the /memory_blocks address. Call stop() once to shut the threads
    down; the host process may also just exit (they are daemon threads).
    """

    def __init__(self, reader: TorchReader, sampler: Sampler, host: str, port: int,
                 clock: Callable[[], float], relief: Relief | None = None) -> None:
        self._reader = reader
        self._sampler = sampler
        self._clock = clock
        self.relief = relief  # None: POST /v1/internal/empty_cache answers 404
        server = _Server6 if ":" in host else _Server  # "::" binds every IPv6 (and, on Linux, IPv4) address
        self._httpd = server((host, port), _Handler)
        self._httpd.exporter = self
        self.host = host
        self.port = int(self._httpd.server_address[1])
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                        name=THREAD_NAME, daemon=True)
        self._stopped = False

    @property
    def url(self) -> str:
        """The address of the JSON endpoint, for gatekeeper's sources entry."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{JSON_PATH}"

    @property
    def sampler(self) -> Sampler:
        """The snapshot sampler (its counters tell how many snapshots ran)."""
        return self._sampler

    def memory_blocks(self) -> dict[str, Any]:
        """Returns the JSON document /memory_blocks serves. Never raises."""
        try:
            readings = self._reader.read()
        except NotReady as e:
            return {"memory_blocks": [], "error": str(e)}
        except Exception as e:  # noqa: BLE001 - never into the host
            return {"memory_blocks": [], "error": f"read: {e}"}
        now = self._clock()
        error = self._sampler.error()
        blocks = []
        for r in readings:
            try:
                blocks.append(compute_block(r, self._sampler.summary(r.device), now, error))
            except Exception as e:  # noqa: BLE001
                blocks.append({"gpu_id": str(r.device), "error": f"compute: {e}"})
        return {"memory_blocks": blocks}

    def metrics_text(self) -> str:
        """Returns the Prometheus text /metrics serves. Never raises."""
        doc = self.memory_blocks()
        text = prom.render(doc["memory_blocks"])
        if "error" in doc:
            text = f"# gatekeeper_exporter: {doc['error']}\n" + text
        return text

    def _start(self) -> None:
        self._sampler.start()
        if self.relief is not None:
            self.relief.start()
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stops serving, sampling and relief; waits up to timeout seconds for each thread."""
        if self._stopped:
            return
        self._stopped = True
        self._sampler.stop(timeout)
        if self._thread.is_alive():
            self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout)
        if self.relief is not None:
            self.relief.stop(timeout)


def start(port: int = 8001, host: str = "127.0.0.1", devices: Sequence[int] | None = None,
          interval: float = 1.0, clock: Callable[[], float] | None = None, empty_cache: bool = False,
          token: str | None = None, empty_cache_interval: float = relief.DEFAULT_MIN_INTERVAL,
          empty_cache_timeout: float = relief.DEFAULT_TIMEOUT) -> Exporter:
    """Starts the exporter in this process and returns its handle.

    port: TCP port (0 picks a free one; see the handle's .port). host: the
    address to bind, loopback by default; "0.0.0.0" (every IPv4 address)
    or "::" (every address) when gatekeeper runs in another pod. devices:
    CUDA device indexes to report; None means those this process has
    allocated on. interval:
    seconds between snapshot checks (a snapshot is taken only when the
    allocator changed). clock: monotonic seconds, for tests.

    empty_cache: serve POST /v1/internal/empty_cache, which runs
    torch.cuda.empty_cache() for the reported devices (off by default; see
    relief.py for what it costs). token: the bearer token it requires;
    None lets loopback callers only. empty_cache_interval: seconds from the
    end of one call to the next (>= 0). empty_cache_timeout: seconds a
    request waits for the work (> 0).

    A bad argument raises ValueError and binding the port OSError;
    everything after start is reported in the JSON, never raised.
    """
    clock = clock or time.monotonic
    reader = TorchReader(devices)
    sampler = Sampler(reader, interval, clock)
    action = None
    if empty_cache:
        action = Relief(reader, clock, token=token, min_interval=empty_cache_interval, timeout=empty_cache_timeout)
    elif token is not None and not relief.valid_token(token):
        raise ValueError("gatekeeper_exporter: token must be visible ASCII without spaces, not empty")
    exporter = Exporter(reader, sampler, host, port, clock, action)
    exporter._start()
    logger.info("gatekeeper_exporter: serving %s", exporter.url)
    if action is not None:
        logger.info("gatekeeper_exporter: POST %s is on, for %s", relief.PATH,
                    "callers with the bearer token" if action.token_required else "loopback callers only")
    return exporter


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    exporter: Exporter


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    server_version = "gatekeeper-exporter"
    timeout = 30  # an idle keep-alive connection does not pin a thread forever

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        path = self.path.split("?", 1)[0]
        exporter = self.server.exporter
        if path == JSON_PATH:
            body = json.dumps(exporter.memory_blocks(), separators=(",", ":")).encode()
            self._send(200, "application/json", body)
        elif path == METRICS_PATH:
            self._send(200, "text/plain; version=0.0.4; charset=utf-8", exporter.metrics_text().encode())
        elif path == relief.PATH and exporter.relief is not None:
            self._send(405, "text/plain; charset=utf-8", b"use POST\n", (("Allow", "POST"),))
        else:
            self._send(404, "text/plain; charset=utf-8", b"not found: try /memory_blocks or /metrics\n")

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        path = self.path.split("?", 1)[0]
        close = () if self._discard_body() else (("Connection", "close"),)
        action = self.server.exporter.relief
        if path == relief.PATH and action is None:
            self._send(404, "text/plain; charset=utf-8", relief.DISABLED_MESSAGE.encode(), close)
        elif path == relief.PATH:
            answer = action.request(str(self.client_address[0]), self.headers.get("Authorization"))
            body = json.dumps(answer.doc, separators=(",", ":")).encode()
            self._send(answer.status, "application/json", body, answer.headers + close)
        elif path in (JSON_PATH, METRICS_PATH):
            self._send(405, "text/plain; charset=utf-8", b"use GET\n", (("Allow", "GET"),) + close)
        else:
            self._send(404, "text/plain; charset=utf-8", b"not found\n", close)

    def _discard_body(self) -> bool:
        """Reads and drops the request body (the POST takes none); False when it cannot,
        and the connection must then close: a chunked body (http.server does not decode
        those) or one over MAX_DISCARDED_BODY."""
        if self.headers.get("Transfer-Encoding"):
            return False
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            return False
        if not 0 <= length <= MAX_DISCARDED_BODY:
            return False
        if length:
            self.rfile.read(length)
        return True

    def _send(self, status: int, content_type: str, body: bytes, headers: Sequence[tuple[str, str]] = ()) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for name, value in headers:
            self.send_header(name, value)  # "Connection: close" also makes http.server close it
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        logger.debug("gatekeeper_exporter: " + format, *args)
