"""The vLLM-like engine's arithmetic: model and GPU figures, memory plan, step buffers, roofline.

Pure functions, no torch: the engine (oom_engine.py) turns the buffer lists
into real tensors, and scripts/gpu/test_oom.py checks them on the CPU. The
buffers of one step are those of the Go simulator (sim/engine_mem.go,
stepBuffers), in the same order, so the real allocator meets the same
sequence of sizes that the replay's allocator model meets.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GIB = 1 << 30


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer by the figures the plan needs (config.json's names)."""

    name: str
    params: int
    layers: int
    hidden: int
    intermediate: int
    kv_heads: int
    head_dim: int
    vocab: int
    dtype_bytes: int = 2
    max_model_len: int = 8192

    @property
    def weight_bytes(self) -> int:
        return self.params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """2 (K and V) × layers × KV heads × head dim × bytes: 131 072 for Llama-3-8B."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    @property
    def embed_bytes(self) -> int:
        return self.vocab * self.hidden * self.dtype_bytes


# sim/gpu.go's preset: Hugging Face config.json of meta-llama/Meta-Llama-3-8B.
LLAMA3_8B = ModelSpec(name="meta-llama/Meta-Llama-3-8B", params=8_030_261_248, layers=32, hidden=4096,
                      intermediate=14336, kv_heads=8, head_dim=128, vocab=128256)


@dataclass(frozen=True)
class GpuSpec:
    """The roofline's figures of one GPU (NVIDIA data sheets, SIM-FACTS.md)."""

    name: str
    bandwidth: float  # bytes/s
    peak_flops: float  # dense bf16


def gpu_spec(device_name: str) -> GpuSpec:
    """The figures for a device name as torch reports it; H100's for an unknown one (the name says so)."""
    n = device_name.upper()
    if "H200" in n:
        return GpuSpec("H200", 4.8e12, 989e12)
    if "H100" in n:
        return GpuSpec("H100", 3.35e12, 989e12)
    if "A100" in n:
        return GpuSpec("A100", 2.04e12, 312e12)
    return GpuSpec(f"{device_name} (H100 figures assumed)", 3.35e12, 989e12)


@dataclass(frozen=True)
class EngineSettings:
    """vLLM's engine arguments the stand-in honours. Defaults as stated next to each."""

    gpu_memory_utilization: float = 0.9  # vLLM's default
    max_num_seqs: int = 256  # vLLM's long-standing default; config.yaml's max_inflight assumes it
    max_num_batched_tokens: int = 8192  # vLLM V1's default on H100-class GPUs
    block_size: int = 16  # vLLM's default
    prefill_efficiency: float = 0.5  # fraction of peak FLOPS a prefill reaches (sim's default)


@dataclass
class StepShape:
    """What decides the sizes of one step's buffers (sim/engine_mem.go's stepShape)."""

    tokens: int = 0  # tokens computed in the step (prefill chunks + decodes)
    seqs: int = 0  # sequences in the step
    samples: int = 0  # sequences that sample a token at the end of the step
    max_blocks: int = 0  # the widest block-table row
    sort: bool = False  # some sampled sequence uses top-p: the sampler sorts
    logprobs: bool = False  # some sampled sequence wants log-probabilities
    prompt_logits: int = 0  # the most prompt tokens one prompt_logprobs request computes in the step


@dataclass(frozen=True)
class Op:
    """One allocator call of a step.

    kind "get": a new tensor of nbytes (dtype, shape), numbered in order;
    "matmul": a new tensor = tensor[arg] @ the LM head (the one real
    multiplication of a step), numbered like a get; "put": drop tensor[arg];
    "mark": the middle of the forward pass, where the step spends its time.
    """

    kind: str
    nbytes: int = 0
    dtype: str = "uint8"
    shape: tuple[int, ...] = field(default=())
    arg: int = -1
    label: str = ""


class _Ops:
    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.gets = 0

    def get(self, nbytes: int, dtype: str, label: str, shape: tuple[int, ...] = ()) -> int:
        size = DTYPE_BYTES[dtype]
        self.ops.append(Op("get", nbytes, dtype, shape or (nbytes // size,), label=label))
        self.gets += 1
        return self.gets - 1

    def matmul(self, a: int, nbytes: int, label: str) -> int:
        self.ops.append(Op("matmul", nbytes, "bfloat16", arg=a, label=label))
        self.gets += 1
        return self.gets - 1

    def put(self, i: int) -> None:
        self.ops.append(Op("put", arg=i))

    def mark(self) -> None:
        self.ops.append(Op("mark"))


DTYPE_BYTES = {"bfloat16": 2, "float32": 4, "int64": 8, "int32": 4, "bool": 1, "uint8": 1}


def step_ops(m: ModelSpec, sh: StepShape) -> list[Op]:
    """One eager step's allocations in PyTorch's order (sim/engine_mem.go stepBuffers, tp = 1).

    Input tensors, the residual stream and one decoder layer's temporaries
    (the other layers reuse the same cached blocks), a prompt_logprobs
    request's logits and log-softmax, then the LM head and the sampler for
    the sequences that sample. Everything still live is dropped at the end.
    """
    r = _Ops()
    T, n, S = sh.tokens, sh.seqs, sh.samples
    H, I, V, dt = m.hidden, m.intermediate, m.vocab, m.dtype_bytes
    r.get(T * 8, "int64", "input_ids")
    r.get(T * 8, "int64", "positions")
    r.get(T * 8, "int64", "slot_mapping")
    r.get(n * 4, "int32", "seq_lens")
    r.get((n + 1) * 4, "int32", "query_start_loc")
    r.get(n * max(sh.max_blocks, 1) * 4, "int32", "block_table")
    _forward(r, T, H, H + 2 * m.kv_heads * m.head_dim, I, dt)
    if sh.prompt_logits > 0:
        logits = r.get(sh.prompt_logits * V * dt, "bfloat16", "prompt_logits")
        lp = r.get(sh.prompt_logits * V * 4, "float32", "prompt_logprobs")
        r.put(logits)
        r.put(lp)
    if S > 0:
        _sampler(r, sh, S, H, V, dt)
    return r.ops


def _forward(r: _Ops, T: int, H: int, qkv_width: int, I: int, dt: int) -> None:
    r.get(T * H * dt, "bfloat16", "hidden")
    r.get(T * H * dt, "bfloat16", "residual")
    qkv = r.get(T * qkv_width * dt, "bfloat16", "qkv")
    attn = r.get(T * H * dt, "bfloat16", "attn")
    r.put(qkv)
    o = r.get(T * H * dt, "bfloat16", "o_proj")
    r.put(attn)
    gate_up = r.get(T * 2 * I * dt, "bfloat16", "gate_up")
    act = r.get(T * I * dt, "bfloat16", "act")
    r.mark()
    r.put(gate_up)
    down = r.get(T * H * dt, "bfloat16", "down")
    r.put(act)
    r.put(o)
    r.put(down)


def _sampler(r: _Ops, sh: StepShape, S: int, H: int, V: int, dt: int) -> None:
    last = r.get(S * H * dt, "bfloat16", "last_hidden", shape=(S, H))
    logits16 = r.matmul(last, S * V * dt, "logits_bf16")
    r.get(S * V * 4, "float32", "logits_f32")
    r.put(logits16)
    r.put(last)
    r.get(S * V * 4, "float32", "probs")
    if sh.sort:
        vals = r.get(S * V * 4, "float32", "sorted")
        idx = r.get(S * V * 8, "int64", "sort_indices")
        cum = r.get(S * V * 4, "float32", "cumsum")
        mask = r.get(S * V, "bool", "top_p_mask")
        r.put(cum)
        r.put(mask)
        r.put(vals)
        r.put(idx)
    if sh.logprobs:
        r.get(S * V * 4, "float32", "logprobs")
    r.get(S * 8, "int64", "sampled")


def profile_shape(m: ModelSpec, s: EngineSettings) -> StepShape:
    """The profiling step: max_num_batched_tokens over min(max_num_seqs, tokens) dummy sequences,
    every one sampled with top-p (vLLM V1's _dummy_sampler_run: top_p and top_k for the full batch)."""
    seqs = min(s.max_num_seqs, s.max_num_batched_tokens)
    per_seq = -(-s.max_num_batched_tokens // seqs)
    return StepShape(tokens=s.max_num_batched_tokens, seqs=seqs, samples=seqs,
                     max_blocks=-(-per_seq // s.block_size), sort=True)


def peak_bytes(ops: list[Op]) -> int:
    """The most bytes live at once in ops (before the allocator's rounding)."""
    live: dict[int, int] = {}
    cur = peak = 0
    i = 0
    for op in ops:
        if op.kind in ("get", "matmul"):
            live[i] = op.nbytes
            cur += op.nbytes
            peak = max(peak, cur)
            i += 1
        elif op.kind == "put":
            cur -= live.pop(op.arg, 0)
    return peak


def kv_blocks(total: int, m: ModelSpec, s: EngineSettings, weights: int, peak: int, non_torch: int) -> int:
    """vLLM's determine_available_memory: total × utilization − weights − activation peak − non-torch increase,
    in whole KV blocks (0 when nothing is left)."""
    avail = int(total * s.gpu_memory_utilization) - weights - peak - non_torch
    return max(0, avail // (s.block_size * m.kv_bytes_per_token))


def weight_tensors(m: ModelSpec) -> list[int]:
    """Bytes of the weight tensors: embedding, LM head, one tensor per decoder layer."""
    layer = (m.weight_bytes - 2 * m.embed_bytes) // m.layers
    return [m.embed_bytes, m.embed_bytes] + [layer] * m.layers


def step_seconds(m: ModelSpec, g: GpuSpec, s: EngineSettings, tokens: int, kv_tokens: int) -> float:
    """The roofline (SIM-FACTS.md): the longer of reading all weights plus the batch's KV context at the
    memory bandwidth, and 2 × params FLOPs per computed token at prefill_efficiency of peak."""
    mem = (m.weight_bytes + kv_tokens * m.kv_bytes_per_token) / g.bandwidth
    comp = 2 * m.params * tokens / (g.peak_flops * s.prefill_efficiency)
    return max(mem, comp)


def seq_tensor_bytes(prompt: int, max_tokens: int) -> int:
    """The per-request GPU state held while a request runs: its token ids, prompt and output budget,
    as int64 (sim/engine_mem.go seqTensorBytes: the tensor vLLM V0 kept for penalties)."""
    return (prompt + max_tokens) * 8
