#!/usr/bin/env python3
"""The oom phase of scripts/gpu/check.sh (issue 34, item 6): an engine OOM on a real GPU, with and without gatekeeper.

    vllm_like.py --out DIR [--gatekeeper BIN] [--budget-s 185]    the GPU run (check.sh's step "oom")
    vllm_like.py --dry-run [--out DIR] [--gatekeeper BIN]          the same orchestration on the CPU, fake GPU
    vllm_like.py serve|neighbour ...                               the child processes (started by the above)

Each run starts fresh processes on GPU 0, loopback only:
  * the vLLM-like server (oom_server.py): Llama-3-8B's shapes and weight
    size (random stand-ins, one real LM head), max_num_seqs 1024 and
    max_num_batched_tokens 8192 (vLLM's server defaults on an H100 or H200,
    and the replay's), vLLM V1's memory plan at gpu_memory_utilization 0.9:
    the model runner's persistent input buffers first (outside the plan),
    the weights, a profile at 8192 tokens over 1024 dummy sequences whose
    sampler runs as _dummy_sampler_run (FlashInfer, then the native path,
    whose Triton row buffer stays allocated), the KV cache per layer, then
    a warm-up step of the profile's shape whose blocks stay cached. Eager:
    no CUDA graphs, so no graph estimate in the plan and every step's
    forward goes through the caching allocator, as vLLM with
    --enforce-eager. Continuous batching with chunked prefill; each step
    allocates its real buffers (oom_plan.py: the replay's sizes and order,
    sim/engine_mem.go and sim/sampler.go: the forward, the LM head's logits
    held to the step's end, FlashInfer's softmax for top-p or the native
    draw without, prompt_logprobs after sampling) and holds them for its
    roofline time. A request holds no GPU tensor of its own (V1 keeps token
    ids on the CPU). An OOM kills the engine: 500s, /health 503, exit. The
    allocator exporter runs in it (gatekeeper_exporter.start, port 0).
  * a neighbour (oom_neighbour.py), a second process on the same GPU: NVML
    sees its memory, the engine's allocator does not.
  * the load (oom_load.py), sent (a) straight at the server, (b) through
    gatekeeper in enforce mode, whose policy lists the exporter and the
    server's /metrics with memory admission (vocab_size 128256,
    batch.memory_share 0.6) and config.yaml's defaults otherwise.
Every 0.5 s a row of the time series (oom_report.py). A run stops at the
engine's death (the first OOM) or at its cap.

Fixed up front, not tuned to any outcome (the same for both runs):
  * load: seed 34, 50 s; 12 requests/s with three bursts at 45/s (10-14 s,
    22-26 s, 34-38 s). On an H100 the roofline puts the stand-in's capacity
    near 25 requests/s for this mix (about 31 ms of prefill and 7 ms of
    decode per request), so the steady rate is half of it and the bursts
    twice it: the batch grows until the KV cache is full (about 450 000
    tokens, some 440 of these sequences, before max_num_seqs) and vLLM's own
    queue grows, as in the incident (50 QPS fine, bursts to 80 fail).
    Prompts: 60 % 32-512 tokens, 30 % 512-2048, 10 % 2048-6144; max_tokens
    16-256 (every sequence generates all of them); top_p 0.9 on 30 %; n=2
    on 4 %, n=4 on 1 %; prompt_logprobs on 3 %. No retries.
  * neighbour: from the first arrival, every 2 s, 2 % of the device at a
    time, as long as NVML's free memory stays at or above 3 % of the device:
    a second engine that keeps a margin by the only figure it can see.
    vLLM's plan leaves the engine's allocator the profiled peak plus
    (1 − 0.9) of the device, less two CUDA contexts and the persistent
    buffers; the warm-up's cached blocks hold about the peak, so NVML shows
    about 8 % free after boot (the fake GPU's figures, 0.5 GiB contexts).
    The neighbour brings NVML's free memory down to 3 % within about 4 s,
    before the first burst, and takes back whatever the engine returns to
    the driver later. The engine then meets the bursts, the long prompts and
    the prompt_logprobs requests with what its allocator already holds plus
    3 % of the device. Whether that ends in an OOM is what the run measures;
    NVML never reads above 97 % used because of the neighbour. (It starts
    with the load because a CPU preview on the fake GPU, --dry-run
    --full-load, showed a start at 6 s finding NVML's free memory already at
    3 %: the engine's cache had grown into its slack first, and the
    neighbour took nothing.)
  * each run: at most 50 s of load + 15 s to drain (cut equally in both runs
    when --budget-s is short, which the summary then says).

The dry run (--dry-run) is a plumbing check, not a measurement: a fake
80 GiB device of 132 SMs (fake_gpu.py: byte counts, PyTorch's
caching-allocator rules, a driver shared by the processes), 5 s of load
with more long prompts and prompt_logprobs, and a neighbour that takes all
the free memory at 1 s, so the unprotected run's OOM is certain and its
record can be checked. It
asserts its invariants: every run has series rows, the OOM is detected and
recorded, the outcomes add up, the files are written.

Outputs in DIR: oom-series-unprotected.csv, oom-series-gatekeeper.csv,
oom-summary.json, GPU-RESULTS.md (for bench/GPU-RESULTS.md), and per run
oom/<run>/: server.log, neighbour.log, death.json, gatekeeper/ (policy,
check, log, final /admin/state and /metrics).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "exporters", "pytorch"))

import oom_report  # noqa: E402
from oom_load import LoadRunner, LoadSpec, schedule  # noqa: E402
from oom_neighbour import NeighbourSpec, neighbour_main  # noqa: E402
from oom_plan import LLAMA3_8B, EngineSettings  # noqa: E402

GIB = 1 << 30
MIB = 1 << 20
NO_COUNTS = {"sent": 0, "served": 0, "refused": 0, "failed": 0, "not_sent": 0, "in_flight": 0, "details": {}}


@dataclass(frozen=True)
class Profile:
    """Everything a run is made of; REAL and DRY are the two."""

    dry: bool
    engine: EngineSettings
    load: LoadSpec
    neighbour: NeighbourSpec
    drain_s: float  # after the last arrival, at most
    start_timeout_s: float  # a child's readiness, at most
    startup_s: float  # what a run's start-up is expected to take (for the budget)
    memory_share: float = 0.6  # gatekeeper's batch.memory_share (config.yaml's default)
    fake_total: int = 80 * GIB
    fake_context: int = 512 * MIB


REAL = Profile(
    dry=False, engine=EngineSettings(),
    load=LoadSpec(seed=34, duration_s=50, base_qps=12, bursts=((10, 4, 45), (22, 4, 45), (34, 4, 45)),
                  prompt_mix=((0.6, 32, 512), (0.3, 512, 2048), (0.1, 2048, 6144)), max_tokens=(16, 256),
                  top_p_share=0.3, n_mix=((2, 0.04), (4, 0.01)), prompt_logprobs_share=0.03),
    neighbour=NeighbourSpec(start_s=0, every_s=2, step_frac=0.02, floor_frac=0.03, steps=25),
    drain_s=15, start_timeout_s=120, startup_s=25)

DRY = Profile(
    dry=True, engine=EngineSettings(),
    load=LoadSpec(seed=34, duration_s=5, base_qps=10, bursts=((2.0, 1.5, 40),),
                  prompt_mix=((0.5, 32, 512), (0.2, 512, 2048), (0.3, 2048, 6144)), max_tokens=(8, 64),
                  top_p_share=0.3, n_mix=((2, 0.1), (4, 0.05)), prompt_logprobs_share=0.2, timeout_s=20),
    neighbour=NeighbourSpec(start_s=1.0, every_s=0.5, step_frac=1.0, floor_frac=0.0, steps=8),
    drain_s=4, start_timeout_s=30, startup_s=3)


def profile_of(args: argparse.Namespace) -> Profile:
    """DRY or REAL; --dry-run --full-load: REAL's load, neighbour and caps on the fake GPU (slow: minutes)."""
    if args.dry_run and args.full_load:
        return replace(REAL, dry=True, start_timeout_s=DRY.start_timeout_s, startup_s=DRY.startup_s)
    return DRY if args.dry_run else REAL


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def gatekeeper_policy(listen: str, admin: str, upstream: str, exporter_url: str, p: Profile) -> str:
    """Enforce mode; the exporter and the server's /metrics; memory admission; config.yaml's defaults otherwise."""
    return f"""# written by scripts/gpu/vllm_like.py: config.yaml's defaults but for these keys
mode: enforce
server:
  listen: "{listen}"
  admin_listen: "{admin}"
  drain_delay: 0s
  shutdown_timeout: 2s
upstreams:
  - name: vllm-like
    url: {upstream}
    max_inflight: {p.engine.max_num_seqs}
    gpus: ["0"]
    sources:
      - {{kind: vllm, url: {upstream}/metrics}}
      - {{kind: memory_blocks, url: {exporter_url}}}
    vocab_size: {LLAMA3_8B.vocab}
batch:
  memory_share: {p.memory_share}
estimate:
  prompt_logprobs_chunk: {p.engine.max_num_batched_tokens}
"""


# ---------------------------------------------------------------- child processes


class Child:
    """A child process whose first stdout line is a JSON readiness object; stderr goes to DIR/NAME.log."""

    def __init__(self, name: str, cmd: list[str], rd: str, stdin: bool = False) -> None:
        self.name = name
        self.log = open(os.path.join(rd, f"{name}.log"), "w")
        self.out = open(os.path.join(rd, f"{name}.out"), "w")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True, bufsize=1,
                                     stdin=subprocess.PIPE if stdin else subprocess.DEVNULL)
        self.lines: queue.Queue[str] = queue.Queue()
        self.last: dict[str, Any] = {}
        threading.Thread(target=self._read, name=f"{name}-stdout", daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.out.write(line)
            self.out.flush()
            self.lines.put(line)
            try:
                self.last = json.loads(line)
            except ValueError:
                pass

    def ready(self, timeout: float) -> dict[str, Any] | None:
        end = time.monotonic() + timeout
        for _ in range(1000):
            left = end - time.monotonic()
            if left <= 0 or self.proc.poll() is not None and self.lines.empty():
                return None
            try:
                doc = json.loads(self.lines.get(timeout=min(left, 1.0)))
            except queue.Empty:
                continue
            except ValueError:
                continue
            if doc.get("ready"):
                return doc
        return None

    def send(self, text: str) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(text)
            self.proc.stdin.flush()
        except (OSError, ValueError):
            pass

    def stop(self) -> None:
        if self.proc.stdin:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()

    def tail(self, n: int = 6) -> str:
        try:
            with open(self.log.name) as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""


class Gatekeeper:
    """gatekeeper in front of the server: its policy checked with -check, then started."""

    def __init__(self, binary: str, rd: str, upstream: str, exporter_url: str, p: Profile) -> None:
        self.dir = os.path.join(rd, "gatekeeper")
        os.makedirs(self.dir, exist_ok=True)
        self.listen, self.admin = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        cfg = os.path.join(self.dir, "policy.yaml")
        with open(cfg, "w") as f:
            f.write(gatekeeper_policy(self.listen, self.admin, upstream, exporter_url, p))
        chk = subprocess.run([binary, "-config", cfg, "-check"], capture_output=True, text=True, timeout=30)
        with open(os.path.join(self.dir, "check.txt"), "w") as f:
            f.write(f"rc={chk.returncode}\n{chk.stdout}{chk.stderr}")
        if chk.returncode not in (0, 3):  # 3: warnings only
            raise RuntimeError(f"gatekeeper -check refused the policy: {chk.stdout}{chk.stderr}")
        self.log = open(os.path.join(self.dir, "gatekeeper.log"), "w")
        self.proc = subprocess.Popen([binary, "-config", cfg], stdout=self.log, stderr=subprocess.STDOUT)

    @property
    def state_url(self) -> str:
        return f"http://{self.admin}/admin/state"

    def wait_ready(self, timeout: float) -> bool:
        end = time.monotonic() + timeout
        for _ in range(int(timeout / 0.1) + 1):
            try:
                with urllib.request.urlopen(f"http://{self.listen}/readyz", timeout=1) as r:
                    if r.status == 200:
                        return True
            except Exception:  # noqa: BLE001
                pass
            if time.monotonic() >= end or self.proc.poll() is not None:
                return False
            time.sleep(0.1)
        return False

    def save(self) -> None:
        for name, url in (("state-final.json", self.state_url), ("metrics-final.txt", f"http://{self.admin}/metrics")):
            try:
                with urllib.request.urlopen(url, timeout=2) as r, open(os.path.join(self.dir, name), "wb") as f:
                    f.write(r.read())
            except Exception as e:  # noqa: BLE001
                with open(os.path.join(self.dir, name), "w") as f:
                    f.write(f"error: {e}\n")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


# ---------------------------------------------------------------- one run


def child_cmd(kind: str, rd: str, p: Profile, fake_dir: str, max_s: float) -> list[str]:
    cmd = [sys.executable, os.path.abspath(__file__), kind, "--out", rd, "--max-s", str(round(max_s, 1)),
           "--gpu-memory-utilization", str(p.engine.gpu_memory_utilization),
           "--max-num-seqs", str(p.engine.max_num_seqs),
           "--max-num-batched-tokens", str(p.engine.max_num_batched_tokens)]
    if kind == "neighbour":
        cmd += ["--neighbour-spec", json.dumps(asdict(p.neighbour))]
    if p.dry:
        cmd += ["--dry-run", "--fake-dir", fake_dir, "--fake-total", str(p.fake_total),
                "--fake-context", str(p.fake_context)]
    return cmd


def watch(server: Child, death_path: str, load: LoadRunner, end: float) -> str:
    """Waits for the engine's death, the load's end or the cap; says which."""
    for _ in range(100000):
        if os.path.exists(death_path):
            return "engine died"
        if server.proc.poll() is not None:
            return f"server exited ({server.proc.returncode})"
        if load.dispatched() and load.counts()["in_flight"] == 0:
            return "load done"
        if time.monotonic() >= end:
            return "cap"
        time.sleep(0.1)
    return "cap"


def run_once(name: str, p: Profile, gk_binary: str | None, out: str, cap_s: float,
             nvml: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One run on fresh processes; returns its summary and its series."""
    rd = os.path.join(out, "oom", name)
    shutil.rmtree(rd, ignore_errors=True)  # a former run's death.json would end this one at once
    os.makedirs(rd)
    fake_dir = os.path.join(rd, "fake-driver")
    death_path = os.path.join(rd, "death.json")
    life = cap_s + p.start_timeout_s + 30  # no child outlives the run
    extra: dict[str, Any] = {"notes": [], "cap_s": cap_s}
    children: list[Any] = []
    series: oom_report.Series | None = None
    load: LoadRunner | None = None
    counts: dict[str, Any] = NO_COUNTS
    t0 = time.monotonic()
    try:
        nb: Child | None = Child("neighbour", child_cmd("neighbour", rd, p, fake_dir, life), rd, stdin=True)
        children.append(nb)
        if nb.ready(p.start_timeout_s) is None:
            extra["notes"].append(f"the neighbour did not start: {nb.tail()!r}")
            nb = None
        server = Child("server", child_cmd("serve", rd, p, fake_dir, life), rd)
        children.append(server)
        ready = server.ready(p.start_timeout_s)
        if ready is None:
            extra["notes"].append(f"the server did not start: {server.tail()!r}")
            return oom_report.run_summary(name, [], None, t0, NO_COUNTS, extra), []
        extra["server"] = {k: ready.get(k) for k in ("plan", "device", "torch", "cuda", "settings", "alloc_conf")}
        base = f"http://127.0.0.1:{ready['port']}"
        gk = None
        if gk_binary:
            gk = Gatekeeper(gk_binary, rd, base, ready["exporter_url"], p)
            children.append(gk)
            if not gk.wait_ready(20):
                extra["notes"].append("gatekeeper's /readyz did not turn 200 within 20 s; the load went on")
        target = f"http://{gk.listen}" if gk else base
        load = LoadRunner(target + "/v1/completions", schedule(p.load), LLAMA3_8B.name, LLAMA3_8B.vocab, p.load)
        neighbour = nb
        series = oom_report.Series({"exporter": ready["exporter_url"], "metrics": base + "/metrics",
                                    "admin": gk.state_url if gk else None}, load.counts,
                                   lambda: int((neighbour.last if neighbour else {}).get("held", 0)), nvml)
        t0 = time.monotonic()
        series.start(t0)
        if nb:
            nb.send("go\n")
        load.start(t0)
        extra["stopped_by"] = watch(server, death_path, load, t0 + cap_s)
        load.stop()
        load.wait_idle(5)
        counts = load.counts()  # before the teardown: what is in flight now is unfinished, not failed
        time.sleep(1.5 if extra["stopped_by"] != "load done" else 0)  # rows just after the death
        series.stop()
        extra["elapsed_s"] = round(time.monotonic() - t0, 2)
        extra["neighbour_held_bytes"] = int((nb.last if nb else {}).get("held", 0))
        if gk:
            gk.save()
    finally:
        if series:
            series.stop()
        for c in reversed(children):
            c.stop()
    death = None
    if os.path.exists(death_path):
        with open(death_path) as f:
            death = json.load(f)
    if load and load.latencies:
        lat = sorted(load.latencies)
        extra["served_latency_s"] = {"p50": round(lat[len(lat) // 2], 3), "p99": round(lat[int(len(lat) * 0.99)], 3)}
    rows = series.rows if series else []
    return oom_report.run_summary(name, rows, death, t0, counts, extra), rows


def wait_gpu_idle(nvml: Any, limit: float = 20.0) -> None:
    """Waits (at most limit s) until GPU 0 is back near idle after a run's processes exited."""
    if nvml is None:
        return
    end = time.monotonic() + limit
    for _ in range(int(limit / 0.5) + 1):
        used = nvml()
        if used is None or used < 0.05 or time.monotonic() >= end:
            return
        time.sleep(0.5)


# ---------------------------------------------------------------- the phase


def phase(args: argparse.Namespace) -> int:
    p = profile_of(args)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    for name in ("unprotected", "gatekeeper"):  # a former phase's series must not pass for this one's
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(out, f"oom-series-{name}.csv"))
    start = time.monotonic()
    gk = args.gatekeeper or None
    if gk and not os.access(gk, os.X_OK):
        print(f"oom: gatekeeper binary {gk!r} is not executable; the gatekeeper run is skipped", flush=True)
        gk = None
    runs = [("unprotected", None)] + ([("gatekeeper", gk)] if gk else [])
    skipped = [] if gk else ["gatekeeper: no binary (--gatekeeper); the run through gatekeeper is skipped"]
    for line in skipped:
        print(f"oom: {line}", flush=True)
    cap = min(p.load.duration_s + p.drain_s, (args.budget_s - 10) / len(runs) - p.startup_s)
    if cap < 5:
        runs = []
        skipped.append(f"every run: a budget of {args.budget_s:.0f} s leaves no time for one")
    arrivals = schedule(p.load)
    nvml = None if p.dry else oom_report.nvidia_smi_reader()
    summary: dict[str, Any] = {
        "dry_run": p.dry, "date_utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "nvml_source": "nvidia-smi" if nvml else "cudaMemGetInfo (the exporter's used_bytes)",
        "settings": {"model": asdict(LLAMA3_8B), "engine": asdict(p.engine), "load": asdict(p.load),
                     "requests": len(arrivals), "neighbour": asdict(p.neighbour), "memory_share": p.memory_share,
                     "run_cap_s": round(cap, 1), "cut_short": cap < p.load.duration_s},
        "runs": [], "skipped": skipped}
    series: dict[str, list[dict[str, Any]]] = {}
    try:
        for name, binary in runs:
            left = args.budget_s - (time.monotonic() - start)
            if left < cap + p.startup_s:
                summary["skipped"].append(f"{name}: skipped, {left:.0f} s of the budget left")
                print(f"oom: {name}: skipped, {left:.0f} s left", flush=True)
                continue
            print(f"oom: {name}: starting (cap {cap:.0f} s, {len(arrivals)} requests)", flush=True)
            try:
                s, rows = run_once(name, p, binary, out, cap, nvml)
            except Exception as e:  # noqa: BLE001 - the other run and the report go on
                s, rows = oom_report.run_summary(name, [], None, 0.0, NO_COUNTS,
                                                 {"notes": [f"the run failed: {e!r}"]}), []
            summary["runs"].append(s)
            series[name] = rows
            print(f"oom: {name}: {oom_report._oom_line(s)}; requests {s['requests']}; rows {len(rows)}", flush=True)
            wait_gpu_idle(nvml)
    finally:
        summary["elapsed_s"] = round(time.monotonic() - start, 1)
        write_outputs(out, summary, series)
    if p.dry and not args.full_load:
        check_dry(out, summary, series, bool(gk))
        print(f"oom dry run: ok in {summary['elapsed_s']} s ({out})", flush=True)
    return 0


def write_outputs(out: str, summary: dict[str, Any], series: dict[str, list[dict[str, Any]]]) -> None:
    for name, rows in series.items():
        oom_report.write_csv(os.path.join(out, f"oom-series-{name}.csv"), rows)
    with open(os.path.join(out, "oom-summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    with open(os.path.join(out, "GPU-RESULTS.md"), "w") as f:
        f.write(oom_report.render_markdown(summary, series))


def check_dry(out: str, summary: dict[str, Any], series: dict[str, list[dict[str, Any]]], with_gk: bool) -> None:
    """The dry run's invariants; an AssertionError names the one that failed."""
    runs = {r["run"]: r for r in summary["runs"]}
    assert set(runs) == ({"unprotected", "gatekeeper"} if with_gk else {"unprotected"}), runs.keys()
    for name, r in runs.items():
        assert len(series[name]) >= 2, f"{name}: {len(series[name])} series rows"
        assert all(row.get("free_bytes") is not None for row in series[name][:1]), f"{name}: no exporter figures"
        c = r["requests"]
        assert c["sent"] > 0, f"{name}: nothing sent"
        assert c["sent"] == c["served"] + c["refused"] + c["failed"] + c["unfinished"], f"{name}: outcomes {c}"
    u = runs["unprotected"]
    assert u["oom"], f"the dry unprotected run recorded no OOM: {u.get('death')} {u.get('notes')}"
    assert u["death"]["at_s"] > 0 and u["torch_at_death"]["reserved_bytes"] > 0, u["death"]
    assert u["exporter_at_death"]["free_bytes"] is not None and u["nvml_used_frac_at_death"] is not None, u
    assert u["death"]["failed_alloc"]["bytes"] > 0, u["death"]
    assert u["requests"]["failed"] > 0, f"the OOM failed no request: {u['requests']}"
    if with_gk:
        assert any(row.get("gk_level") for row in series["gatekeeper"]), "no gatekeeper level in the series"
        assert any(row.get("gk_window") for row in series["gatekeeper"]), "no gatekeeper window in the series"
    for f in ["oom-summary.json", "GPU-RESULTS.md"] + [f"oom-series-{n}.csv" for n in runs]:
        assert os.path.getsize(os.path.join(out, f)) > 0, f
    md = open(os.path.join(out, "GPU-RESULTS.md")).read()
    assert "DRY RUN" in md and all(n in md for n in runs), "GPU-RESULTS.md lacks a run"


# ---------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    kind = argv.pop(0) if argv and argv[0] in ("serve", "neighbour") else "phase"
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="")
    p.add_argument("--dry-run", action="store_true", help="the CPU run against the fake GPU")
    p.add_argument("--full-load", action="store_true", help="with --dry-run: the GPU run's load and caps (minutes)")
    p.add_argument("--gatekeeper", default="", help="gatekeeper binary (the second run)")
    p.add_argument("--budget-s", type=float, default=0, help="wall-clock budget of the phase (default 185; dry 60)")
    p.add_argument("--max-s", type=float, default=300, help="children: lifetime at most")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument("--max-num-seqs", type=int, default=EngineSettings().max_num_seqs)
    p.add_argument("--max-num-batched-tokens", type=int, default=EngineSettings().max_num_batched_tokens)
    p.add_argument("--neighbour-spec", default=json.dumps(asdict(REAL.neighbour)), help="neighbour: its schedule")
    p.add_argument("--fake-dir", default="")
    p.add_argument("--fake-total", type=int, default=80 * GIB)
    p.add_argument("--fake-context", type=int, default=512 * MIB)
    args = p.parse_args(argv)
    if kind == "serve":
        from oom_server import serve_main

        return serve_main(args)
    if kind == "neighbour":
        from oom_server import load_torch

        return neighbour_main(args, NeighbourSpec(**json.loads(args.neighbour_spec)), load_torch)
    if not args.budget_s:
        args.budget_s = 60 if args.dry_run and not args.full_load else 185
    if not args.out:
        args.out = tempfile.mkdtemp(prefix="oom-dry-") if args.dry_run else os.environ.get("OUT", "./gpu-out")

    def on_term(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)  # so the phase's finally writes what it has

    signal.signal(signal.SIGTERM, on_term)
    return phase(args)


if __name__ == "__main__":
    raise SystemExit(main())
