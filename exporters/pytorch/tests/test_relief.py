"""The empty_cache relief: access, refusals, the work on its own thread, its figures."""

from __future__ import annotations

import logging
import threading
import types
import unittest
from typing import Any
from unittest import mock

from gatekeeper_exporter import relief
from gatekeeper_exporter.reader import TorchReader
from gatekeeper_exporter.relief import THREAD_NAME, Answer, Relief

from . import scenario
from .fake_torch import MIB, Installed
from .helpers import WAIT, FakeClock

GPU0_FLUSHABLE = 2048 * MIB + 1536 * MIB  # the scenario's wholly free segments on GPU 0
GPU1_FLUSHABLE = 512 * MIB


class LogWatch(logging.Handler):
    """Collects the package logger's records; done is set on the first one containing want."""

    def __init__(self, testcase: unittest.TestCase, want: str) -> None:
        super().__init__(logging.DEBUG)
        self.want = want
        self.records: list[logging.LogRecord] = []
        self.done = threading.Event()
        log = logging.getLogger("gatekeeper_exporter")
        old = log.level
        log.setLevel(logging.DEBUG)
        log.addHandler(self)
        testcase.addCleanup(log.setLevel, old)
        testcase.addCleanup(log.removeHandler, self)

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        if self.want in record.getMessage():
            self.done.set()


class AccessTest(unittest.TestCase):
    def test_is_loopback(self):
        cases = [
            ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("::ffff:127.0.0.1", True),
            ("::1%lo", True), ("10.0.0.5", False), ("::ffff:10.0.0.5", False), ("fe80::1%eth0", False),
            ("0.0.0.0", False), ("::", False), ("localhost", False), ("", False), ("128.0.0.1", False),
        ]
        for host, want in cases:
            with self.subTest(host=host):
                self.assertEqual(relief.is_loopback(host), want)

    def test_check_access(self):
        token = "s3cret-T0ken"
        cases = [
            # (token, Authorization, peer, want status or None for allowed)
            (None, None, "127.0.0.1", None),
            (None, None, "::1", None),
            (None, None, "::ffff:127.0.0.1", None),
            (None, None, "10.0.0.5", 403),
            (None, "Bearer anything", "10.0.0.5", 403),  # no token configured: loopback only
            (token, f"Bearer {token}", "10.0.0.5", None),
            (token, f"bearer   {token} ", "10.0.0.5", None),  # the scheme in any case
            (token, f"Bearer {token}", "127.0.0.1", None),
            (token, None, "127.0.0.1", 401),  # with a token, loopback needs it too
            (token, "", "10.0.0.5", 401),
            (token, "Bearer", "10.0.0.5", 401),
            (token, "Bearer wrong", "10.0.0.5", 401),
            (token, f"Bearer {token}x", "10.0.0.5", 401),
            (token, f"Bearer {token[:-1]}", "10.0.0.5", 401),
            (token, f"Basic {token}", "10.0.0.5", 401),
            (token, "Bearer sécret", "10.0.0.5", 401),  # not ASCII: refused, not raised
        ]
        for tok, auth, peer, want in cases:
            with self.subTest(token=tok, authorization=auth, peer=peer):
                got = relief.check_access(tok, auth, peer)
                if want is None:
                    self.assertIsNone(got)
                    continue
                self.assertEqual(got.status, want)
                self.assertIsInstance(got.doc["error"], str)
                self.assertEqual(dict(got.headers).get("WWW-Authenticate"), "Bearer" if want == 401 else None)

    def test_constant_time_compare(self):
        calls = []

        def compare(a: Any, b: Any) -> bool:
            calls.append((a, b))
            return a == b

        with mock.patch.object(relief.hmac, "compare_digest", compare):
            self.assertIsNone(relief.check_access("tok", "Bearer tok", "10.0.0.5"))
            self.assertEqual(relief.check_access("tok", "Bearer other", "10.0.0.5").status, 401)
        self.assertEqual(calls, [(b"tok", b"tok"), (b"other", b"tok")])

    def test_valid_token(self):
        for token, want in [("abc", True), ("A-._~+/=9", True), ("", False), ("a b", False),
                            ("tab\t", False), ("é", False), ("new\nline", False)]:
            with self.subTest(token=token):
                self.assertEqual(relief.valid_token(token), want)


class FiguresTest(unittest.TestCase):
    def test_released_doc(self):
        doc = relief.released_doc({0: 10 * MIB, 3: 5 * MIB}, {0: 4 * MIB, 3: 6 * MIB}, 0.1234567)
        self.assertEqual(doc, {
            "released_bytes": 6 * MIB,
            "duration_s": 0.123457,
            "devices": [
                {"gpu_id": "0", "reserved_before_bytes": 10 * MIB, "reserved_after_bytes": 4 * MIB,
                 "released_bytes": 6 * MIB},
                # The engine reserved more in between: nothing released, not a negative figure.
                {"gpu_id": "3", "reserved_before_bytes": 5 * MIB, "reserved_after_bytes": 6 * MIB,
                 "released_bytes": 0},
            ],
        })

    def test_retry_after(self):
        for wait, want in [(0.0, "1"), (0.2, "1"), (1.0, "1"), (1.01, "2"), (2.5, "3"), (-1, "1")]:
            with self.subTest(wait=wait):
                self.assertEqual(relief.retry_after(wait), (("Retry-After", want),))

    def test_reserved_falls_back_to_memory_reserved(self):
        cuda = types.SimpleNamespace(memory_stats=lambda d: {}, memory_reserved=lambda d: 42 + d)
        self.assertEqual(relief.reserved(cuda, 1), 43)
        cuda = types.SimpleNamespace(memory_stats=lambda d: {"reserved_bytes.all.current": 7},
                                     memory_reserved=lambda d: 1 / 0)
        self.assertEqual(relief.reserved(cuda, 0), 7)


class ReliefTest(unittest.TestCase):
    def setUp(self):
        self.cuda = scenario.cuda()
        installed = Installed(self.cuda)
        installed.__enter__()
        self.addCleanup(installed.__exit__)
        self.clock = FakeClock(100.0)

    def relief(self, devices: list[int] | None = None, start: bool = True, **kw: Any) -> Relief:
        r = Relief(TorchReader(devices), self.clock, **kw)
        if start:
            r.start()
        self.addCleanup(r.stop, WAIT)
        return r

    def reserved(self, device: int) -> int:
        return self.cuda.stats[device]["reserved_bytes.all.current"]

    def test_released_per_device_and_sum(self):
        def takes_a_while():
            self.clock.t += 0.25  # each empty_cache call takes 0.25 s of the fake clock

        self.cuda.on_empty_cache = takes_a_while
        before = {d: self.reserved(d) for d in (0, 1)}
        free_before = self.cuda.mem[0][0]
        watch = LogWatch(self, "released")
        got = self.relief().request("127.0.0.1", None)
        self.assertEqual(got.status, 200, got.doc)
        self.assertEqual(got.doc, {
            "released_bytes": GPU0_FLUSHABLE + GPU1_FLUSHABLE,
            "duration_s": 0.5,
            "devices": [
                {"gpu_id": "0", "reserved_before_bytes": before[0], "reserved_after_bytes": before[0] - GPU0_FLUSHABLE,
                 "released_bytes": GPU0_FLUSHABLE},
                {"gpu_id": "1", "reserved_before_bytes": before[1], "reserved_after_bytes": before[1] - GPU1_FLUSHABLE,
                 "released_bytes": GPU1_FLUSHABLE},
            ],
        })
        self.assertEqual(self.reserved(0), before[0] - GPU0_FLUSHABLE)
        self.assertEqual(self.cuda.mem[0][0], free_before + GPU0_FLUSHABLE)  # back to the driver
        self.assertTrue(watch.done.wait(WAIT))
        line = [r for r in watch.records if "released" in r.getMessage()]
        self.assertEqual(len(line), 1)
        self.assertEqual(line[0].levelno, logging.INFO)
        self.assertIn(f"for 127.0.0.1 released {GPU0_FLUSHABLE + GPU1_FLUSHABLE} bytes in 0.500 s", line[0].getMessage())

    def test_runs_on_its_thread_in_the_device_context(self):
        cases = [
            # (devices the exporter reports, want (thread, device context) per empty_cache call)
            (None, [(THREAD_NAME, 0), (THREAD_NAME, 1)]),
            ([1], [(THREAD_NAME, 1)]),  # a vLLM worker on cuda:1: never a context on GPU 0
        ]
        for devices, want in cases:
            with self.subTest(devices=devices):
                self.cuda.empty_cache_calls.clear()
                self.clock.t += 10
                got = self.relief(devices).request("127.0.0.1", None)
                self.assertEqual(got.status, 200, got.doc)
                self.assertEqual(self.cuda.empty_cache_calls, want)
                self.assertEqual([d["gpu_id"] for d in got.doc["devices"]], [str(d) for _, d in want])
        self.assertEqual(self.cuda.set_devices, [])  # the relief thread never sets a device for good

    def test_one_call_per_interval(self):
        r = self.relief(min_interval=2.5)
        steps = [
            # (advance the clock by, want status, want Retry-After)
            (0.0, 200, None),
            (0.0, 429, "3"),
            (1.0, 429, "2"),  # 1.5 s left
            (1.4, 429, "1"),  # 0.1 s left: whole seconds, at least 1
            (0.1, 200, None),  # 2.5 s after the last one ended
            (2.4, 429, "1"),
            (5.0, 200, None),
        ]
        calls = 0
        for i, (advance, status, after) in enumerate(steps):
            with self.subTest(step=i):
                self.clock.t += advance
                got = r.request("127.0.0.1", None)
                self.assertEqual(got.status, status, got.doc)
                self.assertEqual(dict(got.headers).get("Retry-After"), after)
                calls += status == 200
                self.assertEqual(self.cuda.calls["empty_cache"], 2 * calls)  # two devices per call
                if status == 429:
                    self.assertIn("at most one call every 2.5 s", got.doc["error"])

    def test_refusals_do_not_count(self):
        r = self.relief(token="tok")
        for _ in range(3):
            self.assertEqual(r.request("10.0.0.5", "Bearer nope").status, 401)
        self.assertEqual(r.request("10.0.0.5", "Bearer tok").status, 200)
        self.assertEqual(self.cuda.calls["empty_cache"], 2)

    def test_busy(self):
        entered, gate = threading.Event(), threading.Event()

        def blocks():
            entered.set()
            gate.wait(WAIT)

        self.cuda.on_empty_cache = blocks
        r = self.relief(devices=[0], min_interval=0)
        first: list[Answer] = []
        t = threading.Thread(target=lambda: first.append(r.request("127.0.0.1", None)))
        t.start()
        self.assertTrue(entered.wait(WAIT), "the first call never reached empty_cache")
        got = r.request("127.0.0.1", None)
        self.assertEqual((got.status, dict(got.headers)), (429, {"Retry-After": "1"}))
        self.assertIn("still running", got.doc["error"])
        gate.set()
        t.join(WAIT)
        self.assertEqual(first[0].status, 200)
        self.assertEqual(r.request("127.0.0.1", None).status, 200)  # min_interval 0: at once

    def test_timeout(self):
        entered, gate = threading.Event(), threading.Event()
        waited: list[float] = []

        def blocks():
            entered.set()
            gate.wait(WAIT)

        def wait(done: threading.Event, timeout: float) -> bool:
            waited.append(timeout)
            if len(waited) > 1:
                return done.wait(WAIT)
            self.assertTrue(entered.wait(WAIT))
            return False  # the first call: its timeout passed (without waiting for it)

        self.cuda.on_empty_cache = blocks
        watch = LogWatch(self, "after the caller's timeout")
        r = self.relief(devices=[0], wait=wait)
        got = r.request("127.0.0.1", None)
        self.assertEqual(got.status, 504)
        self.assertIn("not done after 10 s", got.doc["error"])
        self.assertEqual(waited, [10.0])
        # The work goes on: the next caller hears busy until it ends.
        self.assertEqual(r.request("127.0.0.1", None).status, 429)
        gate.set()
        self.assertTrue(r.wait_idle(WAIT))
        self.assertTrue(watch.done.wait(WAIT), "no log line for the late call")
        self.assertEqual(r.calls, 1)
        self.clock.t += r.min_interval
        self.assertEqual(r.request("127.0.0.1", None).status, 200)

    def test_finished_just_after_the_timeout(self):
        # The worker ends between the wait's timeout and the handler's look: its answer wins.
        def wait(done: threading.Event, timeout: float) -> bool:
            self.assertTrue(done.wait(WAIT))
            return False

        got = self.relief(wait=wait).request("127.0.0.1", None)
        self.assertEqual(got.status, 200)

    def test_torch_errors(self):
        cases = [
            ("empty_cache", RuntimeError("CUDA error: an illegal memory access"),
             "empty_cache: CUDA error: an illegal memory access"),
            ("memory_stats", RuntimeError("boom"), "memory_stats: boom"),
        ]
        for call, err, want in cases:
            with self.subTest(call=call):
                self.cuda.fail[call] = err
                watch = LogWatch(self, "failed")
                got = self.relief(devices=[0]).request("127.0.0.1", None)
                self.assertEqual(got, Answer(500, {"error": want}))
                self.assertTrue(watch.done.wait(WAIT), "no log line")
                line = [r for r in watch.records if "failed" in r.getMessage()][0]
                self.assertEqual(line.levelno, logging.WARNING)
                self.assertIn(want, line.getMessage())
                del self.cuda.fail[call]
                # The thread survives it.
                self.clock.t += 10
                self.assertEqual(self.relief(devices=[0]).request("127.0.0.1", None).status, 200)

    def test_not_ready(self):
        self.cuda.initialized = False
        got = self.relief().request("127.0.0.1", None)
        self.assertEqual(got.status, 503)
        self.assertIn("not initialised", got.doc["error"])
        self.assertEqual(self.cuda.calls["empty_cache"], 0)

    def test_thread_is_a_named_daemon(self):
        r = self.relief()
        r.start()  # idempotent
        threads = [t for t in threading.enumerate() if t.name == THREAD_NAME]
        self.assertEqual(len(threads), 1)
        self.assertTrue(threads[0].daemon)
        r.stop(WAIT)
        self.assertFalse(any(t.name == THREAD_NAME and t.is_alive() for t in threading.enumerate()))
        self.assertEqual(r.request("127.0.0.1", None).status, 503)  # stopped

    def test_stop_answers_a_pending_call(self):
        admitted = threading.Event()

        def wait(done: threading.Event, timeout: float) -> bool:
            admitted.set()
            return done.wait(WAIT)

        r = self.relief(start=False, wait=wait)  # no worker: the call stays pending
        got: list[Answer] = []
        t = threading.Thread(target=lambda: got.append(r.request("127.0.0.1", None)))
        t.start()
        self.assertTrue(admitted.wait(WAIT))
        r.stop(WAIT)
        t.join(WAIT)
        self.assertEqual(got[0].status, 503)
        self.assertEqual(self.cuda.calls["empty_cache"], 0)

    def test_bad_settings(self):
        for kw in ({"token": ""}, {"token": "a b"}, {"token": "é"}, {"min_interval": -1},
                   {"min_interval": float("nan")}, {"timeout": 0}, {"timeout": float("inf")}):
            with self.subTest(**kw), self.assertRaises(ValueError):
                Relief(TorchReader(), self.clock, **kw)


if __name__ == "__main__":
    unittest.main()
