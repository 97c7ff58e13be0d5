"""The HTTP server on 127.0.0.1, port 0, against the fake torch."""

from __future__ import annotations

import socket
import threading
import unittest

from gatekeeper_exporter import server

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
        ex = helpers.start(self, self.cuda)
        names = {t.name: t.daemon for t in threading.enumerate()}
        self.assertTrue(names.get(server.THREAD_NAME))
        ex.stop(helpers.WAIT)
        self.assertNotIn(server.THREAD_NAME, {t.name for t in threading.enumerate() if t.is_alive()})
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
