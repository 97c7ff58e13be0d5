"""CPU tests of the oom phase's parts (scripts/gpu/vllm_like.py and its modules), against the fake GPU.

    python3 -m unittest discover -s scripts/gpu -p 'test_*.py'

GATEKEEPER_BIN, if set, names a gatekeeper binary that checks the policy.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from dataclasses import replace

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import fake_gpu  # noqa: E402
import oom_report  # noqa: E402
import vllm_like  # noqa: E402
from oom_engine import Engine, EngineDead, Request, boot  # noqa: E402
from oom_load import Arrival, body, classify, schedule  # noqa: E402
from oom_neighbour import NeighbourSpec, take_bytes  # noqa: E402
from oom_plan import (LLAMA3_8B, EngineSettings, StepShape, gpu_spec, kv_blocks, peak_bytes, profile_shape,  # noqa: E402
                      step_ops, step_seconds, weight_tensors)
from oom_server import ParseError, metrics_text, parse_completion  # noqa: E402

MIB, GIB = 1 << 20, 1 << 30


def fake(total: int = 80 * GIB, context: int = 0, directory: str | None = None):
    return fake_gpu.build(total, context, directory)


class PlanTest(unittest.TestCase):
    def test_step_ops_puts_only_what_was_got(self) -> None:
        for sh in (StepShape(tokens=300, seqs=3, samples=2, max_blocks=9, sort=True, prompt_logits=200),
                   profile_shape(LLAMA3_8B, EngineSettings()), StepShape(tokens=1, seqs=1)):
            got, put = 0, set()
            for op in step_ops(LLAMA3_8B, sh):
                if op.kind in ("get", "matmul"):
                    got += 1
                elif op.kind == "put":
                    self.assertLess(op.arg, got)
                    self.assertNotIn(op.arg, put)
                    put.add(op.arg)
            self.assertEqual(sum(1 for op in step_ops(LLAMA3_8B, sh) if op.kind == "mark"), 1)

    def test_sampler_buffers_scale_with_samples_and_top_p(self) -> None:
        V = LLAMA3_8B.vocab
        plain = peak_bytes(step_ops(LLAMA3_8B, StepShape(tokens=1, seqs=1, samples=1)))
        sort = peak_bytes(step_ops(LLAMA3_8B, StepShape(tokens=1, seqs=1, samples=1, sort=True)))
        # sorted values, indices, cumsum and mask live at once; without them the peak is the last get (ids)
        self.assertEqual(sort - plain, V * (4 + 8 + 4 + 1) - 8)
        pl = peak_bytes(step_ops(LLAMA3_8B, StepShape(tokens=4096, seqs=1, prompt_logits=4096)))
        self.assertGreaterEqual(pl, 4096 * V * 6)  # the prompt's bf16 logits and float32 log-softmax at once

    def test_plan_arithmetic(self) -> None:
        self.assertEqual(LLAMA3_8B.kv_bytes_per_token, 131072)
        self.assertLessEqual(abs(sum(weight_tensors(LLAMA3_8B)) - LLAMA3_8B.weight_bytes), LLAMA3_8B.layers)
        s = EngineSettings()
        self.assertEqual(kv_blocks(80 * GIB, LLAMA3_8B, s, 16 * GIB, 1 * GIB, 0),
                         (int(80 * GIB * 0.9) - 17 * GIB) // (16 * 131072))
        self.assertEqual(kv_blocks(10 * GIB, LLAMA3_8B, s, 16 * GIB, 0, 0), 0)

    def test_roofline(self) -> None:
        g, s, m = gpu_spec("NVIDIA H100 80GB HBM3"), EngineSettings(), LLAMA3_8B
        self.assertEqual(g.name, "H100")
        decode = step_seconds(m, g, s, tokens=256, kv_tokens=256 * 1000)  # bandwidth-bound
        self.assertAlmostEqual(decode, (m.weight_bytes + 256 * 1000 * 131072) / 3.35e12)
        prefill = step_seconds(m, g, s, tokens=8192, kv_tokens=8192)  # compute-bound
        self.assertAlmostEqual(prefill, 2 * m.params * 8192 / (989e12 * 0.5))
        self.assertIn("assumed", gpu_spec("Some GPU").name)
        self.assertEqual(gpu_spec("NVIDIA H200").name, "H200")


class FakeAllocatorTest(unittest.TestCase):
    def test_pools_segments_and_splits(self) -> None:
        torch = fake()
        cuda = torch.cuda
        a = torch.empty((1000,), dtype=torch.uint8)  # small pool: a 2 MiB segment
        b = torch.empty((3 * MIB,), dtype=torch.uint8)  # large, < 10 MiB: a 20 MiB segment, split
        c = torch.empty((18 * MIB,), dtype=torch.uint8)  # the 17 MiB rest is too small: an 18 MiB segment
        self.assertEqual(cuda.memory_reserved(), 2 * MIB + 20 * MIB + 18 * MIB)
        self.assertEqual(cuda.memory_allocated(), 1024 + 3 * MIB + 18 * MIB)
        self.assertEqual(cuda.memory_stats()["inactive_split_bytes.all.current"], (2 * MIB - 1024) + 17 * MIB)
        e = torch.empty((int(16.5 * MIB),), dtype=torch.uint8)  # best fit: the 17 MiB rest; 0.5 MiB stays inside
        self.assertEqual(cuda.memory_stats()["inactive_split_bytes.all.current"], 2 * MIB - 1024)
        self.assertEqual(cuda.memory_allocated(), 1024 + 3 * MIB + 18 * MIB + 17 * MIB)
        del b, e
        self.assertEqual(cuda.memory_stats()["inactive_split_bytes.all.current"], 2 * MIB - 1024)  # merged back
        d = torch.empty((16 * MIB,), dtype=torch.uint8)  # best fit: the freed 20 MiB block, split
        self.assertEqual(cuda.memory_reserved(), 40 * MIB)
        del a, c, d
        self.assertEqual(cuda.memory_allocated(), 0)
        self.assertEqual(cuda.memory_stats()["inactive_split_bytes.all.current"], 0)
        cuda.empty_cache()
        self.assertEqual(cuda.memory_reserved(), 0)

    def test_oom_after_flush_and_retry(self) -> None:
        torch = fake(total=100 * MIB)
        keep = torch.empty((40 * MIB,), dtype=torch.uint8)
        tmp = torch.empty((40 * MIB,), dtype=torch.uint8)
        del tmp  # cached, wholly free
        big = torch.empty((50 * MIB,), dtype=torch.uint8)  # fits only after the flush
        st = torch.cuda.memory_stats()
        self.assertEqual((st["num_alloc_retries"], st["num_ooms"]), (1, 0))
        with self.assertRaises(torch.cuda.OutOfMemoryError) as cm:
            torch.empty((20 * MIB,), dtype=torch.uint8)
        self.assertIn("reserved by PyTorch but unallocated", str(cm.exception))
        self.assertEqual(torch.cuda.memory_stats()["num_ooms"], 1)
        del keep, big

    def test_driver_counts_other_processes(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            torch = fake(total=1 * GIB, context=100 * MIB, directory=d)
            with open(os.path.join(d, str(os.getppid())), "w") as f:  # a live process holding 500 MiB
                f.write(str(500 * MIB))
            free, total = torch.cuda.mem_get_info(0)
            self.assertEqual((free, total), (1 * GIB - 600 * MIB, 1 * GIB))
            self.assertEqual(torch.cuda.memory_stats()["reserved_bytes.all.current"], 0)  # NVML sees it, torch not
            with self.assertRaises(torch.cuda.OutOfMemoryError):
                torch.empty((500 * MIB,), dtype=torch.uint8)
            with open(os.path.join(d, "999999999"), "w") as f:  # a dead process holds nothing
                f.write(str(400 * MIB))
            self.assertEqual(torch.cuda.mem_get_info(0)[0], 1 * GIB - 600 * MIB)

    def test_exporter_reads_the_fake(self) -> None:
        import gatekeeper_exporter
        import json
        import urllib.request

        torch = fake(total=10 * GIB)
        saved = sys.modules.get("torch")
        fake_gpu.install(torch)
        try:
            keep = [torch.empty((n * MIB,), dtype=torch.uint8) for n in (30, 300, 30)]
            del keep[1]
            exp = gatekeeper_exporter.start(port=0, devices=[0], interval=0.05)
            try:
                self.assertTrue(exp.sampler.wait_first(10))
                with urllib.request.urlopen(exp.url, timeout=5) as r:
                    block = json.loads(r.read())["memory_blocks"][0]
            finally:
                exp.stop()
        finally:
            if saved is None:
                sys.modules.pop("torch", None)
            else:
                sys.modules["torch"] = saved
        self.assertEqual(block["total_bytes"], 10 * GIB)
        self.assertEqual(block["reserved_bytes"], 30 * MIB + 300 * MIB + 30 * MIB)
        self.assertEqual(block["free_bytes"], 10 * GIB - 60 * MIB)  # driver free + the cached 300 MiB


class EngineTest(unittest.TestCase):
    def start(self, torch, settings: EngineSettings, deaths: list) -> tuple[Engine, threading.Thread]:
        b = boot(torch, LLAMA3_8B, settings)
        self.addCleanup(lambda: b.tensors.clear())
        e = Engine(torch, LLAMA3_8B, settings, gpu_spec("H100"), b.lm_head, b.plan["kv_blocks"], deaths.append,
                   sleep=lambda s: None)
        t = threading.Thread(target=e.run, args=(time.monotonic() + 20,), daemon=True)
        t.start()
        return e, t

    def test_boot_follows_vllm_plan(self) -> None:
        torch = fake(total=80 * GIB)
        b = boot(torch, LLAMA3_8B, EngineSettings())
        p = b.plan
        self.assertLess(abs(p["weight_bytes"] - sum(weight_tensors(LLAMA3_8B))), 512 * 34)  # rounded per tensor
        self.assertGreater(p["profile_peak_bytes"], peak_bytes(step_ops(LLAMA3_8B, profile_shape(LLAMA3_8B,
                                                                                             EngineSettings()))) - MIB)
        self.assertEqual(p["kv_blocks"], kv_blocks(80 * GIB, LLAMA3_8B, EngineSettings(), p["weight_bytes"],
                                                   p["profile_peak_bytes"], 0))
        used = 80 * GIB - p["driver_free_after_boot_bytes"]
        self.assertLessEqual(used, 0.9 * 80 * GIB)  # the profile's cache was emptied before the KV cache

    def test_serves_batches_and_preempts(self) -> None:
        torch = fake(total=80 * GIB)
        deaths: list = []
        e, t = self.start(torch, replace(EngineSettings(), max_num_batched_tokens=512), deaths)
        reqs = [Request(prompt=p, max_tokens=5, n=n, top_p=True, prompt_logprobs=pl)
                for p, n, pl in ((700, 1, False), (30, 2, True), (5000, 1, True), (64, 4, False))]
        for r in reqs:
            e.submit(r)
        for r in reqs:
            self.assertTrue(r.done.wait(10), r)
            self.assertIsNone(r.error)
            self.assertEqual(r.finished, r.n)
        self.assertEqual(deaths, [])
        m = e.metrics()
        self.assertEqual((m["running"], m["waiting"], m["dead"]), (0, 0, None))
        self.assertEqual(m["kv_usage"], 0.0)

    def test_oom_kills_the_engine(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            torch = fake(total=80 * GIB, directory=d)
            deaths: list = []
            e, t = self.start(torch, EngineSettings(), deaths)
            warm = Request(prompt=6000, max_tokens=2)  # the forward's buffers for 6000 tokens get cached
            e.submit(warm)
            self.assertTrue(warm.done.wait(10))
            free = torch.cuda.mem_get_info(0)[0]
            grab = torch.empty((free,), dtype=torch.uint8)  # the device's last free bytes, held
            r = Request(prompt=6000, max_tokens=4, prompt_logprobs=True)
            e.submit(r)
            self.assertTrue(r.done.wait(10))
            t.join(10)
            self.assertIsNotNone(r.error)
            self.assertEqual(len(deaths), 1)
            info = deaths[0]
            self.assertEqual(info["kind"], "oom")
            self.assertEqual(info["failed_alloc"]["label"], "prompt_logits")
            self.assertGreater(info["torch"]["reserved_bytes"], 0)
            self.assertEqual(info["torch"]["num_ooms"], 1)
            with self.assertRaises(EngineDead):
                e.submit(Request(prompt=1, max_tokens=1))
            del grab


class ServerTest(unittest.TestCase):
    def test_parse_completion(self) -> None:
        r = parse_completion({"prompt": "x" * 9, "max_tokens": 3, "n": 2, "top_p": 0.9, "prompt_logprobs": 0}, 100)
        self.assertEqual((r.prompt, r.max_tokens, r.n, r.top_p, r.prompt_logprobs), (3, 3, 2, True, True))
        r = parse_completion({"prompt": [1, 2, 3, 4]}, 100)
        self.assertEqual((r.prompt, r.max_tokens, r.top_p, r.prompt_logprobs), (4, 16, False, False))
        for bad in ({"prompt": 5}, {"prompt": "x", "n": 0}, {"prompt": [1], "max_tokens": 100},
                    {"prompt": "x", "stream": True}, {"prompt": ""}, {"prompt": "x", "top_p": 0}):
            with self.assertRaises(ParseError, msg=bad):
                parse_completion(bad, 100)

    def test_metrics_read_back(self) -> None:
        text = metrics_text("m", {"running": 3, "waiting": 7, "kv_usage": 0.25, "preemptions": 1})
        self.assertEqual(oom_report.engine_view(text), {"running": 3.0, "waiting": 7.0, "kv_usage": 0.25})


class LoadTest(unittest.TestCase):
    def test_schedule_is_fixed_by_its_seed(self) -> None:
        spec = vllm_like.REAL.load
        a, b = schedule(spec), schedule(spec)
        self.assertEqual(a, b)
        self.assertNotEqual(a, schedule(replace(spec, seed=35)))
        self.assertTrue(all(0 <= x.at_s < spec.duration_s for x in a))
        expected = spec.base_qps * spec.duration_s + sum(n * (q - spec.base_qps) for _, n, q in spec.bursts)
        self.assertLess(abs(len(a) - expected), 4 * expected ** 0.5)
        self.assertTrue(all(x.prompt_tokens + x.max_tokens <= LLAMA3_8B.max_model_len for x in a))
        self.assertTrue(any(x.prompt_logprobs for x in a) and any(x.n > 1 for x in a) and any(x.top_p for x in a))

    def test_body_and_classify(self) -> None:
        doc = body(Arrival(3, 0.0, 5, 7, 2, True, True), "m", 100)
        self.assertEqual((len(doc["prompt"]), doc["n"], doc["top_p"], doc["prompt_logprobs"]), (5, 2, 0.9, 1))
        self.assertTrue(all(1 <= t < 100 for t in doc["prompt"]))
        self.assertEqual(classify(200, None, None), ("served", ""))
        self.assertEqual(classify(503, "no_memory", None), ("refused", "no_memory"))
        self.assertEqual(classify(502, "upstream_error", None), ("failed", "502 upstream_error"))
        self.assertEqual(classify(503, "upstream_error", None), ("failed", "503 upstream_error"))
        self.assertEqual(classify(500, None, None), ("failed", "500"))
        self.assertEqual(classify(None, None, "timeout"), ("failed", "timeout"))

    def test_neighbour_steps(self) -> None:
        spec = NeighbourSpec(start_s=0, every_s=1, step_frac=0.02, floor_frac=0.03, steps=3)
        total = 80 * GIB
        self.assertEqual(take_bytes(int(0.10 * total), total, spec), int(0.02 * total) // (2 * MIB) * 2 * MIB)
        self.assertEqual(take_bytes(int(0.04 * total), total, spec), (int(0.04 * total) - int(0.03 * total))
                         // (2 * MIB) * 2 * MIB)
        self.assertEqual(take_bytes(int(0.03 * total) + MIB, total, spec), 0)  # below 64 MiB: nothing


class ReportTest(unittest.TestCase):
    def rows(self) -> list[dict]:
        return [{"t_s": t / 2, "free_bytes": GIB * (4 - t / 4), "largest_free_block_bytes": GIB, "ratio": 4 - t / 4,
                 "nvml_used_frac": 0.9 + t / 100, "served": t, "refused": 0, "failed": 0} for t in range(8)]

    def test_summary_and_markdown(self) -> None:
        death = {"kind": "oom", "at_monotonic": 102.6, "error": "CUDA out of memory",
                 "failed_alloc": {"label": "prompt_logits", "bytes": GIB}, "mem_get_info": {"used_frac": 0.97},
                 "torch": {"reserved_bytes": 70 * GIB, "allocated_bytes": 69 * GIB, "inactive_split_bytes": GIB},
                 "exporter_at_death": {"free_bytes": 2 * GIB, "largest_free_block_bytes": GIB}}
        counts = {"sent": 10, "served": 5, "refused": 1, "failed": 3, "in_flight": 1, "details": {"failed: 500": 3}}
        u = oom_report.run_summary("unprotected", self.rows(), death, 100.0, counts, {"server": {}})
        self.assertTrue(u["oom"])
        self.assertEqual(u["death"]["at_s"], 2.6)
        self.assertEqual(u["nvml_used_frac_at_death"], 0.97)
        self.assertEqual(u["exporter_at_death"]["ratio"], 2.0)
        self.assertEqual(u["last_reported"]["t_s"], 2.5)
        self.assertEqual(u["requests"]["unfinished"], 1)
        g = oom_report.run_summary("gatekeeper", self.rows(), None, 100.0, dict(counts, failed=0, served=8),
                                   {"server": {}})
        summary = {"dry_run": False, "date_utc": "d", "nvml_source": "nvidia-smi", "runs": [u, g], "skipped": [],
                   "settings": {"model": vars(LLAMA3_8B), "engine": vars(EngineSettings()),
                                "load": vars(vllm_like.REAL.load), "neighbour": vars(vllm_like.REAL.neighbour),
                                "requests": 10, "memory_share": 0.6, "run_cap_s": 65, "cut_short": False}}
        md = oom_report.render_markdown(summary, {"unprotected": self.rows(), "gatekeeper": self.rows()})
        self.assertIn("ran out of memory at 2.6 s with NVML showing 97.0 %", md)
        self.assertIn("The run through gatekeeper had no OOM", md)
        self.assertNotIn("DRY RUN", md)
        summary["runs"] = [dict(u, oom=False, death=None, engine_died=False)]
        md = oom_report.render_markdown(summary, {"unprotected": self.rows()})
        self.assertIn("did not run out of memory within its cap", md)
        summary["runs"] = [oom_report.run_summary("unprotected", [], None, 0.0, counts, {"notes": ["no torch"]})]
        md = oom_report.render_markdown(summary, {})
        self.assertIn("The unprotected run did not start", md)
        self.assertNotIn("did not run out of memory", md)


class RealTorchTest(unittest.TestCase):
    """The engine's torch calls against a real torch on the CPU (skipped where torch is absent, as in CI):
    the tensor API (shapes, dtype names, randn, matmul of bf16) is real; only torch.cuda is a shim."""

    TINY = replace(LLAMA3_8B, name="tiny", params=1_000_000, layers=2, hidden=64, intermediate=128, kv_heads=2,
                   head_dim=16, vocab=1000, max_model_len=512)

    def shim(self, budget: int):
        try:
            import torch
        except ImportError:
            self.skipTest("no torch here")
        import types

        sizes: list[int] = []

        def empty(shape, dtype, device):
            self.assertEqual(device, "cuda:0")
            t = torch.empty(shape, dtype=dtype, device="cpu")
            if t.numel() * t.element_size() > budget:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate (shim)")
            sizes.append(t.numel() * t.element_size())
            return t

        stats = {"reserved_bytes.all.current": 1, "allocated_bytes.all.current": 1, "allocated_bytes.all.peak": 1}
        cuda = types.SimpleNamespace(
            OutOfMemoryError=torch.cuda.OutOfMemoryError, synchronize=lambda *a: None, set_device=lambda d: None,
            mem_get_info=lambda d=0: (64 * MIB, 64 * MIB), memory_reserved=lambda d=0: 0, memory_allocated=lambda d=0: 0,
            max_memory_allocated=lambda d=0: 0, reset_peak_memory_stats=lambda d=0: None, empty_cache=lambda: None,
            memory_stats=lambda d=0: stats)
        mod = types.SimpleNamespace(cuda=cuda, empty=empty, matmul=torch.matmul,
                                    randn=lambda shape, dtype, device: torch.randn(shape, dtype=dtype),
                                    **{n: getattr(torch, n) for n in ("bfloat16", "float32", "int64", "int32",
                                                                      "bool", "uint8")})
        return mod, sizes

    def test_boot_and_steps_with_real_tensors(self) -> None:
        torch, sizes = self.shim(budget=1 << 40)
        s = EngineSettings(max_num_seqs=8, max_num_batched_tokens=64)
        b = boot(torch, self.TINY, s)
        self.assertEqual(tuple(b.lm_head.shape), (64, 1000))
        deaths: list = []
        e = Engine(torch, self.TINY, s, gpu_spec("H100"), b.lm_head, b.plan["kv_blocks"], deaths.append,
                   sleep=lambda x: None)
        t = threading.Thread(target=e.run, args=(time.monotonic() + 20,), daemon=True)
        t.start()
        reqs = [Request(prompt=p, max_tokens=3, n=n, top_p=tp, logprobs=True, prompt_logprobs=pl)
                for p, n, tp, pl in ((100, 1, True, True), (5, 3, False, False), (40, 1, True, False))]
        for r in reqs:
            e.submit(r)
        for r in reqs:
            self.assertTrue(r.done.wait(20))
            self.assertIsNone(r.error)
        self.assertEqual(deaths, [])
        self.assertIn(8 * 1000 * 8, sizes)  # the profile's sort indices: int64 for 8 sampled rows

    def test_a_real_oom_error_kills_the_engine(self) -> None:
        torch, _ = self.shim(budget=1 << 40)
        s = EngineSettings(max_num_seqs=8, max_num_batched_tokens=64)
        b = boot(torch, self.TINY, s)
        small, _ = self.shim(budget=100_000)
        deaths: list = []
        e = Engine(small, self.TINY, s, gpu_spec("H100"), b.lm_head, b.plan["kv_blocks"], deaths.append,
                   sleep=lambda x: None)
        t = threading.Thread(target=e.run, args=(time.monotonic() + 20,), daemon=True)
        t.start()
        r = Request(prompt=64, max_tokens=2, prompt_logprobs=True)
        e.submit(r)
        self.assertTrue(r.done.wait(20))
        t.join(20)
        self.assertEqual(deaths[0]["kind"], "oom")
        self.assertEqual(deaths[0]["error_type"], "OutOfMemoryError")


class PolicyTest(unittest.TestCase):
    def test_gatekeeper_accepts_the_policy(self) -> None:
        binary = os.environ.get("GATEKEEPER_BIN")
        if not binary:
            self.skipTest("GATEKEEPER_BIN not set")
        text = vllm_like.gatekeeper_policy("127.0.0.1:1", "127.0.0.1:2", "http://127.0.0.1:3",
                                           "http://127.0.0.1:4/memory_blocks", vllm_like.REAL)
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write(text)
        self.addCleanup(os.unlink, f.name)
        r = subprocess.run([binary, "-config", f.name, "-check"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
