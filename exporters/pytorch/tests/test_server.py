"""The HTTP server on 127.0.0.1, port 0, against the fake torch."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import unittest

from gatekeeper_exporter import relief, server

from . import helpers, scenario
from .fake_torch import GIB, MIB, FakeCuda, Installed, block, segment


class ServerTest(unittest.TestCase):
    def setUp(self):
        self.cuda = scenario.cuda()
        installed = Installed(self.cuda)
        installed.__enter__()
        self.addCleanup(installed.__exit__)
        env = helpers.clean_env()
        env.start()
        self.addCleanup(env.stop)

    def test_memory_blocks(self):
        ex = helpers.start(self, self.cuda)
        self.assertTrue(ex.url.startswith("http://127.0.0.1:"))
        doc = helpers.get_json(ex.url)
        self.assertEqual([b["gpu_id"] for b in doc["memory_blocks"]], ["0", "1"])
        self.assertEqual(doc["memory_blocks"][1]["largest_free_block_bytes"], 2560 * MIB)

    def test_requests_never_snapshot(self):
        ex = helpers.start(self, self.cuda)
        taken = self.cuda.calls["memory_snapshot"]
        for i in range(20):
            # The allocator changes under every request: still no snapshot.
            segs = [s for s in self.cuda.segments if s["device"] == 0]
            segs.append(segment(0, (1 << 44) + i * (1 << 32), [block(2 * MIB, "active_allocated"), block(2 * MIB)]))
            self.cuda.load_device(0, segs, free=8 * GIB, total=scenario.TOTAL)
            helpers.get_json(ex.url)
            helpers.get(f"http://127.0.0.1:{ex.port}/metrics")
        self.assertEqual(self.cuda.calls["memory_snapshot"], taken)
        self.assertGreaterEqual(self.cuda.calls["mem_get_info"], 40)  # but every poll reads the counters

    def test_metrics(self):
        ex = helpers.start(self, self.cuda)
        status, ctype, body = helpers.get(f"http://127.0.0.1:{ex.port}/metrics?x=1")
        self.assertEqual(status, 200)
        self.assertTrue(ctype.startswith("text/plain; version=0.0.4"))
        text = body.decode()
        self.assertIn('torch_cuda_allocator_fragmentation_ratio{gpu_id="1"} 0.333333\n', text)
        self.assertIn('torch_cuda_allocator_alloc_retries_total{gpu_id="1"} 3\n', text)
        self.assertIn("# TYPE torch_cuda_allocator_alloc_retries_total counter\n", text)
        self.assertIn('torch_cuda_allocator_info{gpu_id="0",backend="native"} 1\n', text)
        self.assertNotIn("vllm_gpu_memory_fragmentation", text)  # gatekeeper exports that one
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name_labels, value = line.rsplit(" ", 1)
                float(value)
                self.assertTrue(name_labels.startswith("torch_cuda_allocator_"), line)

    def test_not_found(self):
        ex = helpers.start(self, self.cuda)
        for path in ("/", "/memory_blocks/x", "/health", "/v1/internal/metrics"):
            with self.subTest(path=path):
                status, _, _ = helpers.get(f"http://127.0.0.1:{ex.port}{path}")
                self.assertEqual(status, 404)

    def test_threads_are_named_daemons(self):
        ex = helpers.start(self, self.cuda, empty_cache=True)
        names = {t.name: t.daemon for t in threading.enumerate()}
        self.assertTrue(names.get(server.THREAD_NAME))
        self.assertTrue(names.get(relief.THREAD_NAME))
        ex.stop(helpers.WAIT)
        alive = {t.name for t in threading.enumerate() if t.is_alive()}
        self.assertNotIn(server.THREAD_NAME, alive)
        self.assertNotIn(relief.THREAD_NAME, alive)
        with self.assertRaises(OSError):
            socket.create_connection(("127.0.0.1", ex.port), timeout=1).close()

    def test_before_first_snapshot(self):
        self.cuda.fail["memory_snapshot"] = RuntimeError("snapshot refused")
        ex = helpers.start(self, self.cuda, interval=3600)  # waits for the failed attempt
        b = helpers.get_json(ex.url)["memory_blocks"][0]
        self.assertNotIn("largest_free_block_bytes", b)
        self.assertNotIn("fragmentation_ratio", b)
        self.assertIn("free_bytes", b)
        self.assertEqual(b["error"], "memory_snapshot: snapshot refused")

    def test_bind_address(self):
        # host is where the exporter listens: loopback by default, every
        # address when gatekeeper runs in another pod (Kubernetes).
        cases = [
            ("127.0.0.1", "127.0.0.1", "http://127.0.0.1:{port}/memory_blocks"),
            ("0.0.0.0", "127.0.0.1", "http://0.0.0.0:{port}/memory_blocks"),
            ("::1", "::1", "http://[::1]:{port}/memory_blocks"),
            ("::", "::1", "http://[::]:{port}/memory_blocks"),
        ]
        for host, dial, want_url in cases:
            with self.subTest(host=host):
                if ":" in host and not _ipv6_loopback():
                    self.skipTest("no IPv6 loopback here")
                ex = server.start(port=0, host=host, interval=3600)
                self.addCleanup(ex.stop, helpers.WAIT)
                self.assertEqual(ex.url, want_url.format(port=ex.port))
                url_host = f"[{dial}]" if ":" in dial else dial
                doc = helpers.get_json(f"http://{url_host}:{ex.port}/memory_blocks")
                self.assertEqual([b["gpu_id"] for b in doc["memory_blocks"]], ["0", "1"])

    def test_empty_cache_off(self):
        ex = helpers.start(self, self.cuda)
        status, headers, body = helpers.post(f"http://127.0.0.1:{ex.port}{relief.PATH}")
        self.assertEqual(status, 404)
        self.assertTrue(headers["Content-Type"].startswith("text/plain"))
        self.assertIn("empty_cache=True", body.decode())
        self.assertIn("GATEKEEPER_EXPORTER_EMPTY_CACHE=1", body.decode())
        self.assertEqual(helpers.get(f"http://127.0.0.1:{ex.port}{relief.PATH}")[0], 404)
        self.assertNotIn(relief.THREAD_NAME, {t.name for t in threading.enumerate()})
        self.assertEqual(self.cuda.calls["empty_cache"], 0)

    def test_empty_cache(self):
        token = "t0k3n"
        ex = helpers.start(self, self.cuda, clock=helpers.FakeClock(100.0), empty_cache=True, token=token)
        url = f"http://127.0.0.1:{ex.port}{relief.PATH}"
        reserved = [b["reserved_bytes"] for b in helpers.get_json(ex.url)["memory_blocks"]]
        cases = [
            # (headers, body, want status, want headers)
            ({}, b"", 401, {"WWW-Authenticate": "Bearer"}),
            ({"Authorization": "Bearer wrong"}, b"", 401, {"WWW-Authenticate": "Bearer"}),
            ({"Authorization": f"Bearer {token}"}, b'{"ignored": true}', 200, {}),
            ({"Authorization": f"Bearer {token}"}, b"", 429, {"Retry-After": "1"}),  # the fake clock stands still
        ]
        for i, (headers, body, want, want_headers) in enumerate(cases):
            with self.subTest(step=i):
                status, got_headers, got = helpers.post(url, headers, body)
                self.assertEqual(status, want, got)
                self.assertEqual(got_headers["Content-Type"], "application/json")
                doc = json.loads(got)
                for name, value in want_headers.items():
                    self.assertEqual(got_headers[name], value)
                if want != 200:
                    self.assertIsInstance(doc["error"], str)
                    continue
                self.assertEqual([d["gpu_id"] for d in doc["devices"]], ["0", "1"])
                self.assertEqual([d["reserved_before_bytes"] for d in doc["devices"]], reserved)
                self.assertEqual(doc["released_bytes"], sum(d["released_bytes"] for d in doc["devices"]))
                self.assertGreater(doc["released_bytes"], 0)
                self.assertEqual(doc["duration_s"], 0.0)  # the fake clock
                after = [b["reserved_bytes"] for b in helpers.get_json(ex.url)["memory_blocks"]]
                self.assertEqual(after, [d["reserved_after_bytes"] for d in doc["devices"]])
        self.assertEqual(self.cuda.calls["empty_cache"], 2)

    def test_empty_cache_loopback_without_token(self):
        ex = helpers.start(self, self.cuda, empty_cache=True)
        status, _, body = helpers.post(f"http://127.0.0.1:{ex.port}{relief.PATH}")
        self.assertEqual(status, 200, body)
        self.assertGreater(json.loads(body)["released_bytes"], 0)
        # A caller elsewhere is refused by the same check (relief.check_access; tested there).

    def test_methods(self):
        ex = helpers.start(self, self.cuda, empty_cache=True)
        base = f"http://127.0.0.1:{ex.port}"
        cases = [
            ("GET", relief.PATH, 405, "POST"),
            ("POST", "/memory_blocks", 405, "GET"),
            ("POST", "/metrics", 405, "GET"),
            ("POST", "/v1/internal/other", 404, None),
        ]
        for method, path, want, allow in cases:
            with self.subTest(method=method, path=path):
                status, headers, _ = helpers.post(base + path, method=method)
                self.assertEqual(status, want)
                self.assertEqual(headers["Allow"], allow)
        self.assertEqual(self.cuda.calls["empty_cache"], 0)

    def test_post_body(self):
        # The body is ignored but read, so the connection serves the next request;
        # one too large to read is not, and the connection closes after the answer.
        ex = helpers.start(self, self.cuda, clock=helpers.FakeClock(100.0), empty_cache=True)
        cases = [
            # (Content-Length, body sent, want Connection)
            (17, b'{"device": "all"}', None),
            # Only announced: the server answers before any of it is sent (no unread
            # bytes at close, so no reset racing the answer).
            (server.MAX_DISCARDED_BODY + 1, b"", "close"),
        ]
        for length, body, want_connection in cases:
            with self.subTest(length=length):
                conn = http.client.HTTPConnection("127.0.0.1", ex.port, timeout=helpers.WAIT)
                self.addCleanup(conn.close)
                conn.putrequest("POST", "/v1/internal/other")
                conn.putheader("Content-Length", str(length))
                conn.endheaders(body)
                res = conn.getresponse()
                res.read()
                self.assertEqual(res.status, 404)
                self.assertEqual(res.getheader("Connection"), want_connection)
                if want_connection is None:
                    conn.request("GET", "/memory_blocks")
                    res = conn.getresponse()
                    self.assertEqual(res.status, 200)
                    self.assertIn(b"memory_blocks", res.read())

    def test_empty_cache_bad_arguments(self):
        for kw in ({"empty_cache": True, "token": "two words"}, {"token": ""},
                   {"empty_cache": True, "empty_cache_interval": -1}, {"empty_cache": True, "empty_cache_timeout": 0}):
            with self.subTest(**kw), self.assertRaises(ValueError):
                server.start(port=0, **kw).stop()

    def test_port_in_use_raises_at_start(self):
        ex = helpers.start(self, self.cuda)
        with self.assertRaises(OSError):
            other = server.start(port=ex.port)
            other.stop()  # not reached: the port is taken


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


class NoDeviceTest(unittest.TestCase):
    def test_no_cuda(self):
        cases = [("no torch", None, "torch is not imported"),
                 ("cuda not initialised", "uninit", "not initialised")]
        for name, kind, want in cases:
            with self.subTest(name):
                cuda = None
                if kind == "uninit":
                    cuda = FakeCuda()
                    cuda.initialized = False
                with Installed(cuda):
                    ex = helpers.start(self, cuda)
                    doc = helpers.get_json(ex.url)
                    self.assertEqual(doc["memory_blocks"], [])
                    self.assertIn(want, doc["error"])
                    status, _, body = helpers.get(f"http://127.0.0.1:{ex.port}/metrics")
                    self.assertEqual(status, 200)
                    self.assertIn(want, body.decode())
                if cuda is not None:
                    self.assertEqual(set(cuda.calls), {"is_initialized"})

    def test_no_visible_device(self):
        cuda = FakeCuda()
        cuda.count = 0
        cuda.fail["current_device"] = RuntimeError("no CUDA GPUs are available")
        with Installed(cuda):
            ex = helpers.start(self, None)
            doc = helpers.get_json(ex.url)
        self.assertEqual(doc["memory_blocks"], [])
        self.assertIn("no CUDA GPUs", doc["error"])

    def test_cuda_malloc_async(self):
        cuda = scenario.cuda()
        cuda.backend = "cudaMallocAsync"
        with Installed(cuda), helpers.clean_env():
            ex = helpers.start(self, cuda)
            blocks = helpers.get_json(ex.url)["memory_blocks"]
        for b in blocks:
            self.assertEqual(b["allocator_backend"], "cudaMallocAsync")
            for field in ("largest_free_block_bytes", "fragmentation_ratio", "block_count", "alloc_retry_count"):
                self.assertNotIn(field, b)
        self.assertEqual(cuda.calls["memory_snapshot"], 0)


if __name__ == "__main__":
    unittest.main()
