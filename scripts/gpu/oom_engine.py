"""The vLLM-like engine on one CUDA device: memory plan at boot, continuous batching, death on OOM.

boot() allocates as vLLM V1 does (sim/engine.go boot, sim/engine_mem.go
planMemory): the model runner's persistent input buffers (outside the
plan), the weights, a profiling step at max_num_batched_tokens whose
sampler runs as _dummy_sampler_run (FlashInfer, then the native path, whose
Triton row buffer stays allocated), empty_cache, the KV cache sized from
what the profile measured and allocated once per layer, then a warm-up
step of the profile's shape whose blocks stay cached (vLLM calls no
empty_cache after it). Eager: no CUDA graphs, no graph estimate. Engine
runs steps like vLLM V1's scheduler (running requests first, chunked
prefill under the token budget, waiting ones while max_num_seqs and the KV
blocks allow, preemption when blocks run out) and gives each step the
buffers of oom_plan.step_ops as real tensors, one real matmul (the LM head)
among them, holding them for the step's roofline time. A request holds no
GPU tensor of its own between steps: V1 keeps token ids on the CPU
(InputBatch). A request with n > 1 runs n sequences that each prefill the
whole prompt (no prefix cache: an upper bound on its compute and KV blocks).
Every call into torch runs on the engine's thread, except what the exporter
reads from its own threads.
"""

from __future__ import annotations

import gc
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from oom_plan import (EngineSettings, GpuSpec, ModelSpec, Op, StepShape, kv_blocks, persistent_buffers, profile_shape,
                      step_ops, step_seconds, warmup_shape, weight_tensors)

MAX_STEP_S = 2.0  # a step never holds its buffers longer than this
MAX_STEPS = 10_000_000


class EngineDead(RuntimeError):
    """The engine died (an out-of-memory or another error in a step); it takes no more work."""


@dataclass(eq=False)
class Request:
    """One completion request: n sequences of prompt + max_tokens."""

    prompt: int
    max_tokens: int
    n: int = 1
    top_p: bool = False
    logprobs: bool = False
    prompt_logprobs: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    error: str | None = None
    aborted: bool = False
    finished: int = 0  # sequences finished


@dataclass(eq=False)
class Seq:
    req: Request
    computed: int = 0
    generated: int = 0
    blocks: int = 0

    def pending(self) -> int:
        return self.req.prompt + self.generated - self.computed


@dataclass
class Boot:
    """What boot() made and measured; tensors are kept alive by the caller."""

    plan: dict[str, Any]
    lm_head: Any
    tensors: list[Any]


def run_ops(torch: Any, ops: list[Op], lm_head: Any, dev: str, at_mark: Callable[[], None] | None = None,
            current: list[Op] | None = None, kept: list[Any] | None = None) -> None:
    """Makes ops' tensors; at "mark" calls at_mark with the forward's temporaries live.

    current[0] is the op being made when an allocation fails (for the OOM
    record); a "keep" tensor is appended to kept and outlives the step.
    """
    live: list[Any] = []
    for op in ops:
        if current is not None:
            current[0] = op
        if op.kind in ("get", "keep"):
            live.append(torch.empty(op.shape, dtype=getattr(torch, op.dtype), device=dev))
            if op.kind == "keep":
                if kept is None:
                    raise ValueError(f"run_ops: {op.label} outlives the step but nothing keeps it")
                kept.append(live[-1])
        elif op.kind == "matmul":
            live.append(torch.matmul(live[op.arg], lm_head))
        elif op.kind == "put":
            live[op.arg] = None
        elif op.kind == "mark" and at_mark is not None:
            at_mark()
    torch.cuda.synchronize()
    live.clear()


def make_tensors(torch: Any, ops: list[Op], dev: str) -> list[Any]:
    """The tensors of get ops that stay (the persistent buffers)."""
    return [torch.empty(op.shape, dtype=getattr(torch, op.dtype), device=dev) for op in ops if op.kind == "get"]


def boot(torch: Any, m: ModelSpec, s: EngineSettings, device: int = 0) -> Boot:
    """Persistent buffers, weights, profile, KV cache, warm-up as vLLM V1's worker does
    (gpu_worker.determine_available_memory, compile_or_warm_up_model)."""
    cuda = torch.cuda
    cuda.set_device(device)
    dev = f"cuda:{device}"
    free0, total = (int(x) for x in cuda.mem_get_info(device))  # the CUDA context exists from here
    res0 = int(cuda.memory_reserved(device))
    sms = int(cuda.get_device_properties(device).multi_processor_count)
    tensors = make_tensors(torch, persistent_buffers(m, s), dev)  # GPUModelRunner.__init__: outside the plan
    cuda.synchronize()
    persistent = int(cuda.memory_allocated(device))
    sizes = weight_tensors(m)
    tensors.append(torch.empty((sizes[0] // 2,), dtype=torch.bfloat16, device=dev))
    lm_head = torch.randn((m.hidden, m.vocab), dtype=torch.bfloat16, device=dev)  # the only weight a step reads
    tensors += [torch.empty((n // 2,), dtype=torch.bfloat16, device=dev) for n in sizes[2:]]
    cuda.synchronize()
    weights = int(cuda.memory_allocated(device)) - persistent  # load_model's consumed_memory
    gc.collect()
    cuda.empty_cache()
    cuda.reset_peak_memory_stats(device)
    before = int(cuda.memory_allocated(device))
    prof = profile_shape(m, s, sms)
    run_ops(torch, step_ops(m, prof), lm_head, dev, kept=tensors)  # the Triton row buffer stays
    gc.collect()
    cuda.empty_cache()
    peak = int(cuda.max_memory_allocated(device)) - before
    free1, _ = (int(x) for x in cuda.mem_get_info(device))
    res1 = int(cuda.memory_reserved(device))
    non_torch = ((total - free1) - res1) - ((total - free0) - res0)
    blocks = kv_blocks(total, m, s, weights, peak, max(0, non_torch))
    plan: dict[str, Any] = {"total_bytes": total, "free_at_init_bytes": free0, "persistent_bytes": persistent,
                            "weight_bytes": weights, "profile_peak_bytes": peak, "triton_bytes": prof.triton_bytes,
                            "sms": sms, "non_torch_increase_bytes": non_torch, "cuda_graph_bytes": 0,
                            "profile_shape": asdict(prof), "kv_blocks": blocks,
                            "gpu_memory_utilization": s.gpu_memory_utilization, "enforce_eager": True}
    if blocks < 1:
        raise RuntimeError(f"no room for a KV cache: {plan}")
    per_layer = blocks * s.block_size * m.kv_bytes_per_token // m.layers
    tensors += [torch.empty((per_layer // 2,), dtype=torch.bfloat16, device=dev) for _ in range(m.layers)]
    cuda.synchronize()
    free2, _ = (int(x) for x in cuda.mem_get_info(device))
    run_ops(torch, step_ops(m, warmup_shape(m, s)), lm_head, dev)  # its blocks stay cached: no empty_cache
    free3, _ = (int(x) for x in cuda.mem_get_info(device))
    plan.update({"kv_bytes": per_layer * m.layers, "kv_tokens": blocks * s.block_size,
                 "driver_free_before_warmup_bytes": free2,
                 "allocated_after_boot_bytes": int(cuda.memory_allocated(device)),
                 "reserved_after_boot_bytes": int(cuda.memory_reserved(device)),
                 "driver_free_after_boot_bytes": free3})
    return Boot(plan, lm_head, tensors)


class Engine:
    """Continuous batching on one device. Create one with Engine(...); run() on the engine's thread.

    submit and metrics are safe for concurrent use (one lock guards the
    inbox, the death and the published counters); the scheduler's state
    belongs to the engine's thread.
    """

    def __init__(self, torch: Any, m: ModelSpec, s: EngineSettings, g: GpuSpec, lm_head: Any, num_blocks: int,
                 on_death: Callable[[dict[str, Any]], None], device: int = 0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.torch, self.m, self.s, self.g = torch, m, s, g
        self.lm_head, self.dev, self.device = lm_head, f"cuda:{device}", device
        self.total_blocks = num_blocks
        self.on_death, self.sleep = on_death, sleep
        self._lock = threading.Condition()
        # Guarded by _lock:
        self._inbox: deque[Seq] = deque()
        self.dead: str | None = None
        self._published = {"running": 0, "waiting": 0, "kv_usage": 0.0, "preemptions": 0, "steps": 0}
        # The engine thread's:
        self.running: list[Seq] = []
        self.waiting: deque[Seq] = deque()
        self.free_blocks = num_blocks
        self.preemptions = 0
        self.steps = 0
        self._current: list[Op] = [Op("none")]

    # -- any thread

    def submit(self, req: Request) -> None:
        """Queues req's n sequences; raises EngineDead once the engine died."""
        with self._lock:
            if self.dead:
                raise EngineDead(self.dead)
            self._inbox.extend(Seq(req) for _ in range(req.n))
            self._lock.notify()

    def metrics(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._published, dead=self.dead)

    # -- the engine's thread

    def run(self, deadline: float, clock: Callable[[], float] = time.monotonic) -> None:
        """Runs steps until deadline (clock seconds) or death."""
        for _ in range(MAX_STEPS):
            if clock() >= deadline:
                return
            with self._lock:
                if self.dead:
                    return
                while self._inbox:
                    self.waiting.append(self._inbox.popleft())
                if not self.running and not self.waiting:
                    self._lock.wait(0.05)
                    continue
            self._step()

    def _step(self) -> None:
        self._reap_aborted()
        batch = self._schedule()
        if batch:
            sh, seconds = self._shape(batch)
            try:
                self._execute(sh, seconds)
            except Exception as e:  # noqa: BLE001 - an engine dies of any step error, as vLLM's does
                self._die(self._failure(e, sh))
                return
            self.steps += 1
            self._commit(batch)
        self._publish()

    def _schedule(self) -> list[tuple[Seq, int, bool]]:
        budget, bs = self.s.max_num_batched_tokens, self.s.block_size
        batch: list[tuple[Seq, int, bool]] = []
        preempted = self.preemptions
        i = 0
        while i < len(self.running) and budget > 0:
            q = self.running[i]
            p = q.pending()
            n = min(p, budget)
            need = max(0, -(-(q.computed + n) // bs) - q.blocks)
            while need > self.free_blocks and len(self.running) > i + 1:
                self._preempt(self.running[-1])
            if need > self.free_blocks:
                self._preempt(q)
                break
            self.free_blocks -= need
            q.blocks += need
            batch.append((q, n, n == p))
            budget -= n
            i += 1
        while (budget > 0 and len(self.running) < self.s.max_num_seqs and self.waiting
               and self.preemptions == preempted):
            q = self.waiting[0]
            p = q.pending()
            n = min(p, budget)
            need = -(-n // bs)
            if need > self.free_blocks:
                break
            self.waiting.popleft()
            self.free_blocks -= need
            q.blocks = need
            self.running.append(q)
            batch.append((q, n, n == p))
            budget -= n
        return batch

    def _shape(self, batch: list[tuple[Seq, int, bool]]) -> tuple[StepShape, float]:
        sh = StepShape()
        kv_tokens = 0
        for q, n, sample in batch:
            sh.tokens += n
            sh.seqs += 1
            ctx = q.computed + n
            kv_tokens += ctx
            if q.req.prompt_logprobs and q.computed < q.req.prompt:
                sh.prompt_logits = max(sh.prompt_logits, min(ctx, q.req.prompt) - q.computed)
            if sample:
                sh.samples += 1
                sh.top_p = sh.top_p or q.req.top_p
                sh.logprobs = sh.logprobs or q.req.logprobs
        return sh, step_seconds(self.m, self.g, self.s, sh.tokens, kv_tokens)

    def _execute(self, sh: StepShape, seconds: float) -> None:
        torch = self.torch
        start = time.monotonic()

        def hold() -> None:  # the forward pass's time, its temporaries live
            torch.cuda.synchronize()
            wait = seconds - (time.monotonic() - start)
            if wait > 0:
                self.sleep(min(wait, MAX_STEP_S))

        run_ops(torch, step_ops(self.m, sh), self.lm_head, self.dev, hold, self._current)

    def _commit(self, batch: list[tuple[Seq, int, bool]]) -> None:
        done = set()
        for q, n, sample in batch:
            q.computed += n
            if sample:
                q.generated += 1
                if q.generated >= q.req.max_tokens:
                    done.add(q)
                    self._release(q)
                    q.req.finished += 1
                    if q.req.finished >= q.req.n:
                        q.req.done.set()
        if done:
            self.running = [q for q in self.running if q not in done]

    def _preempt(self, q: Seq) -> None:
        """vLLM's RECOMPUTE: q's blocks are freed; it goes back to the head of the queue."""
        self._release(q)
        self.running.remove(q)
        q.computed = 0
        self.waiting.appendleft(q)
        self.preemptions += 1

    def _release(self, q: Seq) -> None:
        self.free_blocks += q.blocks
        q.blocks = 0

    def _reap_aborted(self) -> None:
        gone = [q for q in self.running if q.req.aborted]
        for q in gone:
            self._release(q)
        if gone:
            self.running = [q for q in self.running if not q.req.aborted]
        if any(q.req.aborted for q in self.waiting):
            self.waiting = deque(q for q in self.waiting if not q.req.aborted)

    def _publish(self) -> None:
        with self._lock:
            self._published = {"running": len(self.running), "waiting": len(self.waiting) + len(self._inbox),
                               "kv_usage": round(1 - self.free_blocks / max(1, self.total_blocks), 6),
                               "preemptions": self.preemptions, "steps": self.steps}

    # -- death

    def _failure(self, e: Exception, sh: StepShape) -> dict[str, Any]:
        """What killed the step, read while the step's tensors are still live (e's traceback holds them)."""
        torch = self.torch
        msg = str(e)
        oom = isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in msg.lower() or "ALLOC_FAILED" in msg
        op = self._current[0]
        info: dict[str, Any] = {"kind": "oom" if oom else "error", "error_type": type(e).__name__,
                                "error": msg[:1200], "failed_alloc": {"label": op.label, "bytes": op.nbytes},
                                "shape": asdict(sh), "running": len(self.running), "waiting": len(self.waiting),
                                "steps": self.steps, "preemptions": self.preemptions,
                                "kv_usage": round(1 - self.free_blocks / max(1, self.total_blocks), 6)}
        try:
            st = torch.cuda.memory_stats(self.device)
            info["torch"] = {k: st.get(v) for k, v in (
                ("reserved_bytes", "reserved_bytes.all.current"), ("allocated_bytes", "allocated_bytes.all.current"),
                ("inactive_split_bytes", "inactive_split_bytes.all.current"),
                ("segment_count", "segment.all.current"), ("num_alloc_retries", "num_alloc_retries"),
                ("num_ooms", "num_ooms"), ("peak_allocated_bytes", "allocated_bytes.all.peak"))}
            free, total = (int(x) for x in torch.cuda.mem_get_info(self.device))
            info["mem_get_info"] = {"free_bytes": free, "total_bytes": total,
                                    "used_frac": round((total - free) / total, 6)}
        except Exception as err:  # noqa: BLE001
            info["torch_error"] = str(err)[:300]
        return info

    def _die(self, info: dict[str, Any]) -> None:
        """Fails every request in the engine (their handlers answer 500) and reports the death."""
        with self._lock:
            self.dead = f"{info['kind']}: {info.get('error', '')[:200]}"
            seqs = list(self.running) + list(self.waiting) + list(self._inbox)
            self._inbox.clear()
        for q in seqs:
            q.req.error = self.dead
            q.req.done.set()
        self.running, self.waiting = [], deque()
        self._publish()
        self.on_death(info)
