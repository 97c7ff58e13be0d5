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
from math import prod

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import fake_gpu  # noqa: E402
import oom_report  # noqa: E402
import vllm_like  # noqa: E402
from oom_engine import Engine, EngineDead, Request, boot  # noqa: E402
from oom_load import Arrival, body, classify, schedule  # noqa: E402
from oom_neighbour import NeighbourSpec, take_bytes  # noqa: E402
from oom_plan import (DTYPE_BYTES, LLAMA3_8B, EngineSettings, StepShape, gpu_spec, kv_blocks, peak_bytes,  # noqa: E402
                      persistent_buffers, profile_shape, step_ops, step_seconds, triton_buffer_bytes, warmup_shape,
                      weight_tensors)
from oom_server import ParseError, metrics_text, parse_completion  # noqa: E402

MIB, GIB = 1 << 20, 1 << 30


def fake(total: int = 80 * GIB, context: int = 0, directory: str | None = None):
    return fake_gpu.build(total, context, directory)


def sampler_part(sh: StepShape) -> list[tuple[str, str, int]]:
    """(kind, label or the label of the put's get, bytes) of step_ops(sh) after the forward pass."""
    ops = step_ops(LLAMA3_8B, sh)
    gets = [op for op in ops if op.kind in ("get", "keep", "matmul")]
    down = next(i for i, op in enumerate(ops) if op.label == "down")
    return [(op.kind, gets[op.arg].label if op.kind == "put" else op.label,
             gets[op.arg].nbytes if op.kind == "put" else op.nbytes)
            for op in ops[down + 4:]]  # after the forward's last puts: act, o, down


class PlanTest(unittest.TestCase):
    S, H, V = 4, LLAMA3_8B.hidden, LLAMA3_8B.vocab

    def test_step_ops_puts_only_what_was_got(self) -> None:
        s = EngineSettings()
        for sh in (StepShape(tokens=300, seqs=3, samples=2, top_p=True, logprobs=True, prompt_logits=200),
                   profile_shape(LLAMA3_8B, s, 132), warmup_shape(LLAMA3_8B, s), StepShape(tokens=1, seqs=1)):
            got, put = 0, set()
            for op in step_ops(LLAMA3_8B, sh):
                if op.kind in ("get", "keep", "matmul"):
                    got += 1
                elif op.kind == "put":
                    self.assertLess(op.arg, got)
                    self.assertNotIn(op.arg, put)
                    put.add(op.arg)
            self.assertEqual(sum(1 for op in step_ops(LLAMA3_8B, sh) if op.kind == "mark"), 1)

    def test_persistent_buffers_are_the_sims(self) -> None:
        # sim/engine_mem.go persistentBuffers at the H100 defaults: T 8192, n 1024, a block-table row of 8192 / 16
        T, n, s = 8192, 1024, EngineSettings()
        self.assertEqual((s.max_num_batched_tokens, s.max_num_seqs), (T, n))
        ops = persistent_buffers(LLAMA3_8B, s)
        self.assertEqual([op.nbytes for op in ops],
                         [T * 4, T * 8, (n + 1) * 4, n * 4, n * 512 * 4, T * 8, T * 4096 * 2])
        self.assertTrue(all(op.kind == "get" and op.nbytes == DTYPE_BYTES[op.dtype] * prod(op.shape) for op in ops))
        names = {op.label for op in ops}
        for sh in (StepShape(tokens=300, seqs=3, samples=2, top_p=True, logprobs=True, prompt_logits=200),
                   profile_shape(LLAMA3_8B, s, 132)):
            labels = {op.label for op in step_ops(LLAMA3_8B, sh)}
            self.assertFalse(labels & names, "a step makes an input tensor: V1's live in the persistent buffers")
            self.assertNotIn("request_state", labels)

    def test_sampler_paths(self) -> None:
        S, H, V = self.S, self.H, self.V
        head = [("get", "last_hidden", S * H * 2), ("matmul", "logits_bf16", S * V * 2)]
        f32, probs = ("get", "logits_f32", S * V * 4), ("get", "probs", S * V * 4)
        noise = ("get", "exp_noise", S * V * 4)
        lp, ids = ("get", "logprobs", S * V * 4), ("get", "sampled", S * 8)

        def put(g: tuple[str, str, int]) -> tuple[str, str, int]:
            return ("put",) + g[1:]

        base = StepShape(tokens=S, seqs=S, samples=S)
        cases = [
            ("no top-p: the native draw", base, head + [f32, probs, noise, ids, put(f32), put(probs), put(noise)]),
            ("top-p: FlashInfer samples from one softmax, no sort", replace(base, top_p=True),
             head + [f32, probs, ids, put(f32), put(probs)]),
            ("logprobs: the log-softmax first, kept until the ids", replace(base, top_p=True, logprobs=True),
             head + [f32, lp, probs, ids, put(f32), put(lp), put(probs)]),
            ("profile: FlashInfer, then forced native with the Triton rows",
             replace(base, profile=True, top_p=True, triton_bytes=8 * V * 4),
             head + [f32, put(f32), f32, ("keep", "triton_rows", 8 * V * 4), probs, noise]),
            ("warm-up: the same, the Triton rows already made", replace(base, profile=True),
             head + [f32, put(f32), f32, probs, noise]),
        ]
        for name, sh, want in cases:
            with self.subTest(name):
                self.assertEqual(sampler_part(sh), want)

    def test_prompt_logprobs_after_sampling(self) -> None:
        S, H, V, T, P = 2, self.H, self.V, 4096, 4000
        sh = StepShape(tokens=T, seqs=2, samples=S, prompt_logits=P)
        part = sampler_part(sh)
        labels = [(k, lab) for k, lab, _ in part]
        self.assertLess(labels.index(("get", "sampled")), labels.index(("get", "prompt_logits")))
        self.assertNotIn(("put", "logits_bf16"), labels)  # the step's logits are held through it
        self.assertEqual(part[-4:], [("get", "prompt_logits", P * V * 2), ("get", "prompt_logprobs", P * V * 4),
                                     ("put", "prompt_logits", P * V * 2), ("put", "prompt_logprobs", P * V * 4)])
        # the peak: hidden and residual, the LM head's inputs and logits, the ids, then the prompt's two at once
        self.assertEqual(peak_bytes(step_ops(LLAMA3_8B, sh)), 2 * T * H * 2 + S * H * 2 + S * V * 2 + S * 8 + P * V * 6)

    def test_triton_buffer(self) -> None:
        m, s, V = LLAMA3_8B, EngineSettings(), self.V
        for name, settings, sms, rows in (
                ("H100 defaults: SMs bound it", s, 132, 132),
                ("A100", s, 108, 108),
                ("100 sequences: the next power of two", replace(s, max_num_seqs=100), 132, 128),
                ("fewer tokens than sequences", replace(s, max_num_batched_tokens=48), 132, 64),
                ("below 8 rows: the sort runs, no buffer", replace(s, max_num_seqs=7), 132, 0)):
            with self.subTest(name):
                self.assertEqual(triton_buffer_bytes(m, settings, sms), rows * V * 4)

    def test_profile_peak_is_the_sims(self) -> None:
        m, s = LLAMA3_8B, EngineSettings()
        T, S, H, V = 8192, 1024, self.H, self.V
        triton = 132 * V * 4
        want = 2 * T * H * 2 + S * H * 2 + S * V * 2 + 3 * S * V * 4 + triton  # the sampler's, over the forward's
        self.assertEqual(want, 2_049_003_520)  # sim/README.md: 1.91 GiB on an H100 at 1024 and 8192
        self.assertEqual(peak_bytes(step_ops(m, profile_shape(m, s, 132))), want)
        self.assertEqual(peak_bytes(step_ops(m, warmup_shape(m, s))), want - triton)

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
        s, m = EngineSettings(), LLAMA3_8B
        b = boot(torch, m, s)
        p = b.plan
        persistent = sum(op.nbytes for op in persistent_buffers(m, s))
        self.assertLess(abs(p["persistent_bytes"] - persistent), 512 * 7)  # first, each rounded to 512 B
        self.assertLess(abs(p["weight_bytes"] - sum(weight_tensors(m))), 512 * 34)  # without the persistent buffers
        self.assertEqual((p["sms"], p["triton_bytes"]), (132, 132 * m.vocab * 4))
        prof = peak_bytes(step_ops(m, profile_shape(m, s, 132)))
        self.assertAlmostEqual(p["profile_peak_bytes"], prof, delta=8 * MIB)  # the allocator's rounding
        self.assertEqual(p["kv_blocks"], kv_blocks(80 * GIB, m, s, p["weight_bytes"], p["profile_peak_bytes"], 0))
        # what stays allocated: the persistent buffers, the weights, the Triton rows, the KV cache; no step tensor
        self.assertAlmostEqual(p["allocated_after_boot_bytes"], p["persistent_bytes"] + p["weight_bytes"]
                               + p["triton_bytes"] + p["kv_bytes"], delta=MIB)
        used = 80 * GIB - p["driver_free_before_warmup_bytes"]
        self.assertLessEqual(used, 0.9 * 80 * GIB)  # the profile's cache was emptied before the KV cache
        warm = peak_bytes(step_ops(m, warmup_shape(m, s)))
        self.assertEqual(warm, prof - p["triton_bytes"])
        # the warm-up's blocks stay cached: reserved beyond what is allocated, taken from the driver
        self.assertGreaterEqual(p["reserved_after_boot_bytes"] - p["allocated_after_boot_bytes"], warm)
        self.assertGreaterEqual(p["driver_free_before_warmup_bytes"] - p["driver_free_after_boot_bytes"], warm)

    def test_no_tensor_per_request(self) -> None:
        torch = fake(total=80 * GIB)
        s = replace(EngineSettings(), max_num_batched_tokens=2048)
        b = boot(torch, LLAMA3_8B, s)
        static = torch.cuda.memory_allocated()
        self.assertEqual(static, b.plan["allocated_after_boot_bytes"])
        e = Engine(torch, LLAMA3_8B, s, gpu_spec("H100"), b.lm_head, b.plan["kv_blocks"], lambda info: None,
                   sleep=lambda x: None)
        reqs = [Request(prompt=p, max_tokens=20, n=n, top_p=tp, prompt_logprobs=pl)
                for p, n, tp, pl in ((3000, 1, True, True), (40, 2, False, False), (700, 1, False, True))]
        for r in reqs:
            e.submit(r)
        running = 0
        for _ in range(200):
            with e._lock:  # what run() does before each step
                e.waiting.extend(e._inbox)
                e._inbox.clear()
            e._step()
            running = max(running, len(e.running))
            # between steps only the static tensors are allocated, however many requests run
            self.assertEqual(torch.cuda.memory_allocated(), static)
            if all(r.done.is_set() for r in reqs):
                break
        self.assertEqual(running, 4)
        self.assertTrue(all(r.done.is_set() and r.error is None for r in reqs))

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
            free = torch.cuda.mem_get_info(0)[0]
            grab = torch.empty((free,), dtype=torch.uint8)  # the device's last free bytes, held
            plain = Request(prompt=6000, max_tokens=2)  # the warm-up's cached blocks serve it
            e.submit(plain)
            self.assertTrue(plain.done.wait(10))
            self.assertIsNone(plain.error)
            r = Request(prompt=6000, max_tokens=4, prompt_logprobs=True)  # 4.6 GB the profile never ran
            e.submit(r)
            self.assertTrue(r.done.wait(10))
            t.join(10)
            self.assertIsNotNone(r.error)
            self.assertEqual(len(deaths), 1)
            info = deaths[0]
            self.assertEqual(info["kind"], "oom")
            self.assertIn(info["failed_alloc"]["label"], ("prompt_logits", "prompt_logprobs"))
            self.assertEqual(info["shape"]["prompt_logits"], 6000)
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
            memory_stats=lambda d=0: stats, get_device_properties=lambda d=0: types.SimpleNamespace(
                multi_processor_count=132))
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
        # boot's first tensors: the persistent buffers (T 64, n 8, a block-table row of 512 / 16), as the sim's
        self.assertEqual(sizes[:7], [64 * 4, 64 * 8, 9 * 4, 8 * 4, 8 * 32 * 4, 64 * 8, 64 * 64 * 2])
        self.assertNotIn((100 + 3) * 8, sizes)  # no request's token ids on the device

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
