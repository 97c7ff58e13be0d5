"""The vLLM-like engine's arithmetic: model and GPU figures, memory plan, step buffers, roofline.

Pure functions, no torch: the engine (oom_engine.py) turns the buffer lists
into real tensors, and scripts/gpu/test_oom.py checks them on the CPU. The
buffers are those of the Go simulator, in the same order, so the real
allocator meets the same sequence of sizes that the replay's allocator model
meets: the runner's persistent input buffers made once at start-up
(sim/engine_mem.go persistentBuffers), and per step the forward pass, the
LM head, the sampler with FlashInfer for top-p (sim/sampler.go) and the
prompt_logprobs buffers after sampling (stepBuffers, promptLogprobBuffers).
The engine runs eager, as vLLM with --enforce-eager: no CUDA graphs, so no
graph estimate in the plan and every step's forward goes through the
caching allocator (the sim's -enforce-eager).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

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

    gpu_memory_utilization: float = 0.9  # vLLM's default before v0.21 and the sim's (0.92 since)
    max_num_seqs: int = 1024  # vLLM's OpenAI-server default on GPUs of >= 70 GiB but the A100 (H100, H200)
    max_num_batched_tokens: int = 8192  # the same GPUs' default
    block_size: int = 16  # vLLM's default
    prefill_efficiency: float = 0.5  # fraction of peak FLOPS a prefill reaches (sim's default)


@dataclass
class StepShape:
    """What decides the sizes of one step's buffers (sim/engine_mem.go's stepShape, eager)."""

    tokens: int = 0  # tokens computed in the step (prefill chunks + decodes)
    seqs: int = 0  # sequences in the step
    samples: int = 0  # sequences that sample a token at the end of the step
    top_p: bool = False  # some sampled sequence uses top-p (or top-k): FlashInfer samples
    logprobs: bool = False  # some sampled sequence wants log-probabilities
    prompt_logits: int = 0  # the most prompt tokens one prompt_logprobs request computes in the step
    profile: bool = False  # vLLM's profiling step: the sampler as _dummy_sampler_run runs it
    triton_bytes: int = 0  # profile only: the Triton row buffer it makes (0 at the warm-up: already made)


@dataclass(frozen=True)
class Op:
    """One allocator call of a step.

    kind "get": a new tensor of nbytes (dtype, shape), numbered in order;
    "keep": the same, but it outlives the step (the Triton row buffer);
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

    def get(self, nbytes: int, dtype: str, label: str, shape: tuple[int, ...] = (), kind: str = "get") -> int:
        size = DTYPE_BYTES[dtype]
        self.ops.append(Op(kind, nbytes, dtype, shape or (nbytes // size,), label=label))
        self.gets += 1
        return self.gets - 1

    def matmul(self, a: int, nbytes: int, label: str) -> int:
        self.ops.append(Op("matmul", nbytes, "bfloat16", arg=a, label=label))
        self.gets += 1
        return self.gets - 1

    def put(self, i: int) -> None:
        self.ops.append(Op("put", arg=i))

    def put_from(self, first: int) -> None:
        for i in range(first, self.gets):
            self.put(i)

    def mark(self) -> None:
        self.ops.append(Op("mark"))


DTYPE_BYTES = {"bfloat16": 2, "float32": 4, "int64": 8, "int32": 4, "bool": 1, "uint8": 1}


def persistent_buffers(m: ModelSpec, s: EngineSettings) -> list[Op]:
    """The model runner's input buffers, made once at start-up for the largest step and reused by
    every step (vLLM V1's GPUModelRunner.__init__; sim/engine_mem.go persistentBuffers, same order):
    input ids, positions, query start locations, sequence lengths, the block table (a row of
    ceil(max_model_len / block_size) per sequence), slot mapping and the input embeddings."""
    T, n = s.max_num_batched_tokens, s.max_num_seqs
    rows = -(-m.max_model_len // s.block_size)
    r = _Ops()
    r.get(T * 4, "int32", "input_ids")
    r.get(T * 8, "int64", "positions")
    r.get((n + 1) * 4, "int32", "query_start_loc")
    r.get(n * 4, "int32", "seq_lens")
    r.get(n * rows * 4, "int32", "block_table", shape=(n, rows))
    r.get(T * 8, "int64", "slot_mapping")
    r.get(T * m.hidden * m.dtype_bytes, "bfloat16", "inputs_embeds", shape=(T, m.hidden))
    return r.ops


def triton_buffer_bytes(m: ModelSpec, s: EngineSettings, sms: int) -> int:
    """The native sampler's Triton row buffer, made by the profile and kept for the process's life
    (apply_top_k_top_p_triton's _TRITON_BUFFER_CACHE; sim/sampler.go tritonBufferBytes): min(next power
    of two of min(SMs, rows), SMs) rows of the vocabulary in float32; none for fewer than 8 rows."""
    rows = min(s.max_num_seqs, s.max_num_batched_tokens)
    if rows < 8:
        return 0
    sms = max(sms, 1)
    n = 1
    while n < min(sms, rows):
        n *= 2
    return min(n, sms) * m.vocab * 4


def step_ops(m: ModelSpec, sh: StepShape) -> list[Op]:
    """One eager step's allocations in PyTorch's order (sim/engine_mem.go stepBuffers, tp = 1, no graph).

    The inputs live in the persistent buffers. The residual stream and one
    decoder layer's temporaries (the other layers reuse the same cached
    blocks); for the sequences that sample, the LM head and the sampler;
    then, the logits still held, a prompt_logprobs request's logits and
    log-softmax. Everything still live is dropped at the end (but a "keep").
    """
    r = _Ops()
    T, S = sh.tokens, sh.samples
    H, I, V, dt = m.hidden, m.intermediate, m.vocab, m.dtype_bytes
    _forward(r, T, H, H + 2 * m.kv_heads * m.head_dim, I, dt)
    if S > 0:
        (_profile_sampler if sh.profile else _sampler)(r, sh, S, H, V, dt)
    if sh.prompt_logits > 0:  # after sampling (sample_tokens, then _get_prompt_logprobs_dict)
        logits = r.get(sh.prompt_logits * V * dt, "bfloat16", "prompt_logits")
        lp = r.get(sh.prompt_logits * V * 4, "float32", "prompt_logprobs")
        r.put(logits)
        r.put(lp)
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


def _lm_head(r: _Ops, S: int, H: int, V: int, dt: int) -> None:
    """The sampled positions' hidden states and their bf16 logits, held until the step ends."""
    last = r.get(S * H * dt, "bfloat16", "last_hidden", shape=(S, H))
    r.matmul(last, S * V * dt, "logits_bf16")


def _native(r: _Ops, S: int, V: int) -> None:
    """The native draw (random_sample): softmax probabilities and exponential noise of the same shape."""
    r.get(S * V * 4, "float32", "probs", shape=(S, V))
    r.get(S * V * 4, "float32", "exp_noise", shape=(S, V))


def _sampler(r: _Ops, sh: StepShape, S: int, H: int, V: int, dt: int) -> None:
    """A serving step's sampler (sim/sampler.go step, FlashInfer): the float32 copy, a logprobs request's
    log-softmax, then the draw; its temporaries go when it returns the ids."""
    _lm_head(r, S, H, V, dt)
    first = r.gets
    r.get(S * V * 4, "float32", "logits_f32", shape=(S, V))
    if sh.logprobs:
        r.get(S * V * 4, "float32", "logprobs", shape=(S, V))
    if sh.top_p:
        r.get(S * V * 4, "float32", "probs", shape=(S, V))  # FlashInfer samples from them, no sort
    else:
        _native(r, S, V)
    ids = r.get(S * 8, "int64", "sampled")
    for i in range(first, ids):
        r.put(i)


def _profile_sampler(r: _Ops, sh: StepShape, S: int, H: int, V: int, dt: int) -> None:
    """_dummy_sampler_run (sim/sampler.go profile): temperature, top-k and top-p on every row, no
    logprobs; the FlashInfer call (its float32 copy freed when it returns), then once more forced onto
    the native path, whose Triton kernel makes its row buffer (kept) before the draw."""
    _lm_head(r, S, H, V, dt)
    first = r.gets
    r.get(S * V * 4, "float32", "logits_f32", shape=(S, V))
    r.put_from(first)
    r.get(S * V * 4, "float32", "logits_f32", shape=(S, V))
    if sh.triton_bytes > 0:
        r.get(sh.triton_bytes, "float32", "triton_rows", shape=(sh.triton_bytes // (4 * V), V), kind="keep")
    _native(r, S, V)


def profile_shape(m: ModelSpec, s: EngineSettings, sms: int) -> StepShape:
    """The profiling step: max_num_batched_tokens over min(max_num_seqs, tokens) dummy sequences, each
    sampling one row (sim/engine_mem.go profileShape); sms: the device's SM count (the Triton buffer)."""
    return replace(warmup_shape(m, s), triton_bytes=triton_buffer_bytes(m, s, sms))


def warmup_shape(m: ModelSpec, s: EngineSettings) -> StepShape:
    """The warm-up after the KV cache: the profile's shape, the Triton buffer already made."""
    seqs = min(s.max_num_seqs, s.max_num_batched_tokens)
    return StepShape(tokens=s.max_num_batched_tokens, seqs=seqs, samples=seqs, profile=True)


def peak_bytes(ops: list[Op]) -> int:
    """The most bytes live at once in ops (before the allocator's rounding)."""
    live: dict[int, int] = {}
    cur = peak = 0
    i = 0
    for op in ops:
        if op.kind in ("get", "keep", "matmul"):
            live[i] = op.nbytes
            cur += op.nbytes
            peak = max(peak, cur)
            i += 1
        elif op.kind == "put":
            cur -= live.pop(op.arg, 0)
    return peak


def kv_blocks(total: int, m: ModelSpec, s: EngineSettings, weights: int, peak: int, non_torch: int) -> int:
    """vLLM's determine_available_memory: total × utilization − weights − activation peak − non-torch increase,
    in whole KV blocks (0 when nothing is left). No CUDA graphs' estimate: the engine runs eager. The CUDA
    context and the persistent buffers are not in it: they come out of the headroom outside
    gpu_memory_utilization. The Triton buffer is inside the profiled peak and stays allocated after it."""
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
