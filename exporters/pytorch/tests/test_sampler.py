"""The snapshot sampler: off the request path, rate-limited, change-driven."""

from __future__ import annotations

import threading
import unittest

from gatekeeper_exporter.reader import TorchReader
from gatekeeper_exporter.sampler import THREAD_NAME, Sampler

from . import scenario
from .fake_torch import GIB, MIB, Installed, block, segment
from .helpers import WAIT, FakeClock


class TickTest(unittest.TestCase):
    def setUp(self):
        self.cuda = scenario.cuda()
        self.installed = Installed(self.cuda)
        self.installed.__enter__()
        self.addCleanup(self.installed.__exit__)
        self.clock = FakeClock(100.0)
        self.sampler = Sampler(TorchReader(), interval=1.0, clock=self.clock)

    def split_gpu1(self):
        """A new hole in GPU 1: inactive_split_bytes changes."""
        segs = [s for s in self.cuda.segments if s["device"] == 1]
        segs[1] = segment(1, segs[1]["address"], [block(512 * MIB, "active_allocated"), block(512 * MIB)])
        self.cuda.load_device(1, segs, free=2 * GIB, total=scenario.TOTAL, retries=3)

    def test_steps(self):
        steps = [
            # (advance seconds, change, want snapshot taken)
            (0.0, None, True),  # the first tick takes one
            (0.5, None, False),
            (0.3, "split", False),  # changed, but within the interval of the last one
            (0.2, None, True),  # a full interval after the last one: the change is picked up
            (5.0, None, False),  # nothing changed: none, however long
            (0.0, "segment", True),  # a new segment
            (0.5, "segment", False),  # rate-limited although it changed again
            (0.5, None, True),
            (1.0, None, False),
        ]
        for i, (advance, change, want) in enumerate(steps):
            with self.subTest(step=i):
                self.clock.t += advance
                if change == "split":
                    self.split_gpu1()
                elif change == "segment":
                    segs = [s for s in self.cuda.segments if s["device"] == 0]
                    segs.append(segment(0, (1 << 44) + i * (1 << 32), [block(2 * MIB, "active_allocated")]))
                    self.cuda.load_device(0, segs, free=8 * GIB, total=scenario.TOTAL)
                before = self.cuda.calls["memory_snapshot"]
                self.assertEqual(self.sampler.tick(), want)
                self.assertEqual(self.cuda.calls["memory_snapshot"] - before, int(want))
        self.assertEqual(self.sampler.snapshots_taken, 4)

    def test_summary_and_age(self):
        self.assertIsNone(self.sampler.summary(0))
        self.sampler.tick()
        s = self.sampler.summary(1)
        self.assertEqual(s.taken_at, 100.0)
        self.assertEqual(s.largest_inactive_block, 512 * MIB)
        self.assertIsNone(self.sampler.summary(5))

    def test_failure_keeps_previous_summary(self):
        self.sampler.tick()
        old = self.sampler.summary(0)
        self.cuda.fail["memory_snapshot"] = RuntimeError("boom")
        self.split_gpu1()
        self.clock.t += 2
        self.assertFalse(self.sampler.tick())
        self.assertEqual(self.sampler.error(), "memory_snapshot: boom")
        self.assertIs(self.sampler.summary(0), old)
        # A failed attempt also counts for the rate limit.
        self.assertFalse(self.sampler.tick())
        self.assertEqual(self.cuda.calls["memory_snapshot"], 2)
        del self.cuda.fail["memory_snapshot"]
        self.clock.t += 1
        self.assertTrue(self.sampler.tick())
        self.assertIsNone(self.sampler.error())

    def test_cuda_malloc_async_takes_none(self):
        self.cuda.backend = "cudaMallocAsync"
        self.assertFalse(self.sampler.tick())
        self.assertEqual(self.cuda.calls["memory_snapshot"], 0)

    def test_not_initialised_takes_none(self):
        self.cuda.initialized = False
        self.assertFalse(self.sampler.tick())
        self.assertIsNone(self.sampler.error())
        self.cuda.initialized = True
        self.assertTrue(self.sampler.tick())

    def test_wait_first(self):
        self.assertFalse(self.sampler.wait_first(0))  # nothing yet
        self.sampler.tick()
        self.assertTrue(self.sampler.wait_first(0))

    def test_bad_interval(self):
        for bad in (0, -1, float("nan")):
            with self.assertRaises(ValueError):
                Sampler(TorchReader(), interval=bad)


class ThreadTest(unittest.TestCase):
    def test_background_thread(self):
        cuda = scenario.cuda()
        with Installed(cuda):
            sampler = Sampler(TorchReader(), interval=3600)
            sampler.start()
            sampler.start()  # idempotent
            try:
                self.assertTrue(sampler.wait_first(WAIT), "no snapshot from the thread")
                threads = [t for t in threading.enumerate() if t.name == THREAD_NAME]
                self.assertEqual(len(threads), 1)
                self.assertTrue(threads[0].daemon)
            finally:
                sampler.stop(WAIT)
            self.assertFalse(any(t.name == THREAD_NAME and t.is_alive() for t in threading.enumerate()))
        self.assertEqual(cuda.calls["memory_snapshot"], 1)


if __name__ == "__main__":
    unittest.main()
