"""Reading torch: never imports it, never initialises CUDA, reports failures."""

from __future__ import annotations

import os
import subprocess
import sys
import unittest

from gatekeeper_exporter.reader import NotReady, TorchReader

from . import scenario
from .fake_torch import GIB, FakeCuda, Installed, OldCuda, block, segment

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ImportTest(unittest.TestCase):
    def test_import_without_torch(self):
        code = ("import sys, gatekeeper_exporter, gatekeeper_exporter.vllm_plugin, gatekeeper_exporter.bench\n"
                "assert 'torch' not in sys.modules, 'torch imported'\n"
                "assert 'vllm' not in sys.modules, 'vllm imported'\n"
                "print(gatekeeper_exporter.__version__)\n")
        # A torch that explodes when imported proves the package never imports it.
        poison = os.path.join(PACKAGE_ROOT, "tests", "poison")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([PACKAGE_ROOT, poison]), PYTHONDONTWRITEBYTECODE="1")
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertTrue(out.stdout.strip())

    def test_import_touches_no_cuda(self):
        with Installed(FakeCuda()) as cuda:
            import importlib

            import gatekeeper_exporter
            importlib.reload(gatekeeper_exporter)
            self.assertEqual(sum(cuda.calls.values()), 0)


class ReaderTest(unittest.TestCase):
    def test_no_torch(self):
        with Installed(None):
            with self.assertRaisesRegex(NotReady, "torch is not imported"):
                TorchReader().read()

    def test_cuda_not_initialised(self):
        cuda = scenario.cuda()
        cuda.initialized = False
        with Installed(cuda):
            r = TorchReader()
            for call in (r.read, r.stats, r.snapshot):
                with self.assertRaisesRegex(NotReady, "not initialised"):
                    call()
        # Anything past is_initialized could create a CUDA context.
        self.assertEqual(set(cuda.calls), {"is_initialized"})
        self.assertEqual(cuda.set_devices, [])

    def test_auto_devices_are_those_in_use(self):
        cuda = FakeCuda()
        cuda.count = 4  # four visible, as in a vLLM worker that sees the whole node
        cuda.load_device(2, [segment(2, 0, [block(GIB, "active_allocated")])], free=GIB, total=8 * GIB)
        cuda.count = 4
        cuda.stats[0] = cuda.stats[1] = cuda.stats[3] = {"reserved_bytes.all.current": 0, "segment.all.allocated": 0}
        with Installed(cuda):
            self.assertEqual([r.device for r in TorchReader().read()], [2])
        self.assertEqual(cuda.calls["mem_get_info"], 1)  # no context made on 0, 1 or 3

    def test_auto_devices_fall_back_to_current(self):
        cuda = FakeCuda()
        cuda.count, cuda.current = 2, 1
        cuda.stats = {0: {}, 1: {}}
        cuda.mem = {1: (GIB, 2 * GIB)}
        with Installed(cuda):
            self.assertEqual([r.device for r in TorchReader().read()], [1])

    def test_explicit_devices(self):
        with Installed(scenario.cuda()) as cuda:
            readings = TorchReader(devices=[1]).read()
        self.assertEqual([r.device for r in readings], [1])
        self.assertEqual(readings[0].driver_free, 2 * GIB)
        self.assertEqual(cuda.calls["device_count"], 0)

    def test_thread_pinned_to_a_device_in_use(self):
        # A new thread's current device is 0; mem_get_info(1) switching back
        # to 0 could create a context there, so the thread moves to 1 first.
        with Installed(scenario.cuda()) as cuda:
            TorchReader(devices=[1]).read()
        self.assertEqual([d for _, d in cuda.set_devices], [1])

    def test_mem_get_info_in_relaxed_capture_mode(self):
        # The host may be capturing a CUDA graph in global mode: our thread
        # switches itself to relaxed mode around mem_get_info, then back.
        thread_mode = {"mode": 0}  # this thread's capture mode (0 = global)
        seen = []

        def exchange(ptr):
            old = thread_mode["mode"]
            thread_mode["mode"] = ptr._obj.value
            ptr._obj.value = old
            return 0

        cuda = scenario.cuda()
        real = cuda.mem_get_info
        cuda.mem_get_info = lambda d=None: (seen.append(thread_mode["mode"]), real(d))[1]
        with Installed(cuda):
            TorchReader(capture_exchange=lambda: exchange).read()
        self.assertEqual(seen, [2, 2])  # relaxed for both devices
        self.assertEqual(thread_mode["mode"], 0)  # restored

    def test_no_driver_library(self):
        with Installed(scenario.cuda()):
            readings = TorchReader(capture_exchange=lambda: None).read()
        self.assertEqual([r.errors for r in readings], [(), ()])

    def test_failures_become_errors(self):
        cuda = scenario.cuda()
        cuda.fail["mem_get_info"] = RuntimeError("CUDA error: out of memory")
        with Installed(cuda):
            r = TorchReader(devices=[0]).read()[0]
        self.assertEqual(r.errors, ("mem_get_info: CUDA error: out of memory",))
        self.assertIsNotNone(r.stats)

    def test_snapshot_without_traces(self):
        with Installed(scenario.cuda()) as cuda:
            segs = TorchReader().snapshot()
        self.assertFalse(cuda.last_include_traces)
        self.assertEqual(len(segs), 7 + 10)

    def test_snapshot_shapes(self):
        for cuda in (scenario.cuda(), OldCuda()):
            if isinstance(cuda, OldCuda):
                cuda.load_device(0, scenario.gpu0(), free=GIB, total=80 * GIB)
            for as_dict in (False, True):
                cuda.snapshot_as_dict = as_dict
                with self.subTest(cuda=type(cuda).__name__, as_dict=as_dict), Installed(cuda):
                    segs = TorchReader().snapshot()
                    self.assertTrue(segs)
                    self.assertTrue(all("blocks" in s for s in segs))

    def test_old_torch_has_no_fraction(self):
        cuda = OldCuda()
        cuda.load_device(0, scenario.gpu0(), free=GIB, total=80 * GIB)
        with Installed(cuda):
            self.assertIsNone(TorchReader().read()[0].memory_fraction)

    def test_backend(self):
        cuda = scenario.cuda()
        cuda.backend = "cudaMallocAsync"
        with Installed(cuda):
            r = TorchReader()
            self.assertEqual(r.backend(), "cudaMallocAsync")
            r.backend()
        self.assertEqual(cuda.calls["get_allocator_backend"], 1)  # read once

    def test_expandable_setting_from_env(self):
        with Installed(scenario.cuda()):
            r = TorchReader(env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}).read()
        self.assertTrue(all(x.expandable_setting for x in r))


if __name__ == "__main__":
    unittest.main()
