"""The oom phase's time series, per-run summaries and the GPU-RESULTS.md rendering.

Series samples, every 0.5 s, what each party reports: NVML's used fraction
(nvidia-smi where there is one, else the exporter's used_bytes ÷
total_bytes, which is the serving process's cudaMemGetInfo; the row says
which), the exporter's free bytes and gatekeeper's ratio (free ÷ largest
free block, as gatekeeper reads it), the engine's /metrics, gatekeeper's
level and window from /admin/state, and the load's counts. The summary and
Markdown functions are pure.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

GIB = 1 << 30
HTTP_TIMEOUT = 1.0

COLUMNS = ("t_s", "nvml_used_frac", "nvml_source", "exporter_used_frac", "free_bytes", "largest_free_block_bytes",
           "ratio", "reserved_bytes", "allocated_bytes", "inactive_split_bytes", "alloc_retry_count", "num_ooms",
           "neighbour_bytes", "running", "waiting", "kv_usage", "engine_up", "gk_level", "gk_phase", "gk_window",
           "gk_inflight", "gk_memory_budget_bytes", "gk_memory_held_bytes", "gk_fragmentation",
           "gk_free_memory_bytes", "sent", "served", "refused", "failed", "in_flight")


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT) as r:
        return json.loads(r.read())


def get_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT) as r:
        return r.read().decode()


def nvidia_smi_reader() -> Callable[[], float | None] | None:
    """A reader of GPU 0's NVML used fraction through nvidia-smi, or None where there is none."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None

    def read() -> float | None:
        try:
            out = subprocess.run([exe, "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits",
                                  "-i", "0"], capture_output=True, text=True, timeout=2).stdout
            used, total = (float(x) for x in out.strip().splitlines()[0].split(","))
            return round(used / total, 6)
        except Exception:  # noqa: BLE001
            return None

    return read


def exporter_view(doc: dict[str, Any]) -> dict[str, Any]:
    """The row's fields from one /memory_blocks document (GPU 0)."""
    b = (doc.get("memory_blocks") or [{}])[0]
    row = {k: b.get(k) for k in ("free_bytes", "largest_free_block_bytes", "reserved_bytes", "allocated_bytes",
                                 "inactive_split_bytes", "alloc_retry_count", "num_ooms")}
    if b.get("total_bytes") and b.get("used_bytes") is not None:
        row["exporter_used_frac"] = round(b["used_bytes"] / b["total_bytes"], 6)
    if b.get("free_bytes") is not None and b.get("largest_free_block_bytes"):
        row["ratio"] = round(b["free_bytes"] / b["largest_free_block_bytes"], 6)
    return row


def engine_view(text: str) -> dict[str, Any]:
    """running, waiting, kv_usage from the vLLM-like /metrics."""
    names = {"vllm:num_requests_running": "running", "vllm:num_requests_waiting": "waiting",
             "vllm:kv_cache_usage_perc": "kv_usage"}
    row: dict[str, Any] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        head, _, value = line.rpartition(" ")
        key = names.get(head.partition("{")[0])
        if key:
            row[key] = float(value)
    return row


def gatekeeper_view(state: dict[str, Any]) -> dict[str, Any]:
    """The first upstream's level, window and memory budget from /admin/state (internal/admin/state.go)."""
    ups = state.get("upstreams") or [{}]
    u = ups[0]
    sig = u.get("signals") or {}
    return {"gk_level": u.get("level"), "gk_phase": u.get("phase"), "gk_window": u.get("window_limit"),
            "gk_inflight": u.get("inflight"), "gk_memory_budget_bytes": u.get("memory_budget_bytes"),
            "gk_memory_held_bytes": u.get("memory_held_bytes"),
            "gk_fragmentation": (sig.get("fragmentation") or {}).get("value"),
            "gk_free_memory_bytes": (sig.get("free_memory_bytes") or {}).get("value")}


class Series:
    """Samples one row every interval from t0 on, on a named daemon thread; at most max_rows rows."""

    def __init__(self, sources: dict[str, Any], counts: Callable[[], dict[str, Any]],
                 neighbour: Callable[[], int], nvml: Callable[[], float | None] | None,
                 interval: float = 0.5, max_rows: int = 1000) -> None:
        self.sources, self.counts, self.neighbour, self.nvml = sources, counts, neighbour, nvml
        self.interval, self.max_rows = interval, max_rows
        self.rows: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, t0: float) -> None:
        self._thread = threading.Thread(target=self._run, args=(t0,), name="oom-series", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self, t0: float) -> None:
        for k in range(self.max_rows):
            if self._stop.wait(max(0.0, t0 + k * self.interval - time.monotonic())):
                return
            self.rows.append(self.sample(t0))

    def sample(self, t0: float) -> dict[str, Any]:
        row: dict[str, Any] = {"t_s": round(time.monotonic() - t0, 3)}
        src = self.sources
        try:
            row.update(exporter_view(get_json(src["exporter"])))
        except Exception:  # noqa: BLE001 - a dead server answers nothing
            pass
        try:
            row.update(engine_view(get_text(src["metrics"])))
            row["engine_up"] = 1
        except Exception:  # noqa: BLE001
            row["engine_up"] = 0
        if src.get("admin"):
            try:
                row.update(gatekeeper_view(get_json(src["admin"])))
            except Exception:  # noqa: BLE001
                pass
        used = self.nvml() if self.nvml else None
        if used is not None:
            row["nvml_used_frac"], row["nvml_source"] = used, "nvidia-smi"
        elif row.get("exporter_used_frac") is not None:
            row["nvml_used_frac"], row["nvml_source"] = row["exporter_used_frac"], "cudaMemGetInfo (exporter)"
        row["neighbour_bytes"] = self.neighbour()
        c = self.counts()
        row.update({k: c[k] for k in ("sent", "served", "refused", "failed", "in_flight")})
        return row


def write_csv(path: str, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(COLUMNS), extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


# ---------------------------------------------------------------- summaries (pure)


def row_before(rows: list[dict[str, Any]], t: float) -> dict[str, Any] | None:
    """The last row sampled at or before t whose exporter answered."""
    best = None
    for r in rows:
        if r["t_s"] <= t and r.get("free_bytes") is not None:
            best = r
    return best


def run_summary(name: str, rows: list[dict[str, Any]], death: dict[str, Any] | None, t0: float,
                counts: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """One run's figures: the OOM (when, NVML, the allocator, the exporter) and the requests' outcomes."""
    s: dict[str, Any] = {"run": name, "rows": len(rows), "oom": bool(death and death.get("kind") == "oom"),
                         "engine_died": death is not None, "started": "server" in extra, **extra}
    c = dict(counts)
    c["unfinished"] = c.get("in_flight", 0)
    s["requests"] = c
    frees = [r["free_bytes"] for r in rows if r.get("free_bytes") is not None]
    ratios = [r["ratio"] for r in rows if r.get("ratio") is not None]
    s["lowest_free_bytes"] = min(frees) if frees else None
    s["highest_ratio"] = max(ratios) if ratios else None
    nv = [r["nvml_used_frac"] for r in rows if r.get("nvml_used_frac") is not None]
    s["highest_nvml_used_frac"] = max(nv) if nv else None
    if death is None:
        return s
    at = round(death["at_monotonic"] - t0, 3)
    s["death"] = {"kind": death.get("kind"), "at_s": at, "error": death.get("error"),
                  "failed_alloc": death.get("failed_alloc"), "shape": death.get("shape"),
                  "running": death.get("running"), "waiting": death.get("waiting")}
    smi = death.get("nvidia_smi") or {}
    mgi = death.get("mem_get_info") or {}
    s["nvml_used_frac_at_death"] = smi.get("used_frac", mgi.get("used_frac"))
    s["nvml_source_at_death"] = "nvidia-smi" if smi.get("used_frac") is not None else "cudaMemGetInfo (engine)"
    s["torch_at_death"] = death.get("torch")
    exp = death.get("exporter_at_death") or {}
    s["exporter_at_death"] = {k: exp.get(k) for k in ("free_bytes", "largest_free_block_bytes",
                                                      "fragmentation_ratio", "snapshot_age_seconds")}
    if exp.get("free_bytes") is not None and exp.get("largest_free_block_bytes"):
        s["exporter_at_death"]["ratio"] = round(exp["free_bytes"] / exp["largest_free_block_bytes"], 6)
    last = row_before(rows, at)
    s["last_reported"] = None if last is None else {k: last.get(k) for k in (
        "t_s", "free_bytes", "largest_free_block_bytes", "ratio", "nvml_used_frac", "gk_level", "gk_window",
        "gk_memory_budget_bytes")}
    return s


# ---------------------------------------------------------------- Markdown (pure)


def _gib(v: Any) -> str:
    return "—" if v is None else f"{v / GIB:.2f} GiB"


def _pct(v: Any) -> str:
    return "—" if v is None else f"{100 * v:.1f} %"


def _num(v: Any, fmt: str = "{:.3f}") -> str:
    return "—" if v is None else fmt.format(v)


def _oom_line(s: dict[str, Any]) -> str:
    if not s.get("started"):
        return "did not start (see the notes)"
    d = s.get("death")
    if not d:
        return "no OOM" + (" (engine alive at the end)" if not s.get("engine_died") else "")
    what = "OOM" if s["oom"] else f"engine error ({d.get('error', '')[:60]})"
    return f"{what} at {d['at_s']:.1f} s"


def compare_table(runs: list[dict[str, Any]]) -> list[str]:
    """The runs side by side."""
    names = [r["run"] for r in runs]
    lines = ["| | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(runs)]

    def row(label: str, f: Callable[[dict[str, Any]], str]) -> None:
        lines.append(f"| {label} | " + " | ".join(f(r) for r in runs) + " |")

    def alloc(r: dict[str, Any]) -> str:
        t = r.get("torch_at_death") or {}
        return "—" if not t else (f"{_gib(t.get('reserved_bytes'))} / {_gib(t.get('allocated_bytes'))} / "
                                  f"{_gib(t.get('inactive_split_bytes'))}, retries {t.get('num_alloc_retries')}")

    def failed_alloc(r: dict[str, Any]) -> str:
        fa = (r.get("death") or {}).get("failed_alloc") or {}
        return "—" if not fa else f"{fa.get('label')} ({_gib(fa.get('bytes'))})"

    def outcomes(r: dict[str, Any]) -> str:
        c = r["requests"]
        return f"{c['sent']} / {c['served']} / {c['refused']} / {c['failed']} / {c['unfinished']}"

    row("outcome", _oom_line)
    row("NVML used at the OOM", lambda r: _pct(r.get("nvml_used_frac_at_death")))
    row("exporter at the OOM: free, ratio (free ÷ largest)", lambda r: "—" if not r.get("exporter_at_death") else
        f"{_gib(r['exporter_at_death'].get('free_bytes'))}, {_num(r['exporter_at_death'].get('ratio'))}")
    row("last reported before it: free, ratio", lambda r: "—" if not r.get("last_reported") else
        f"{_gib(r['last_reported'].get('free_bytes'))}, {_num(r['last_reported'].get('ratio'))} "
        f"(at {r['last_reported']['t_s']:.1f} s)")
    row("torch at the OOM: reserved / allocated / inactive split", alloc)
    row("failed allocation", failed_alloc)
    row("requests sent / served / refused / failed / unfinished", outcomes)
    row("refused and failed by reason", lambda r: ", ".join(
        f"{k} {v}" for k, v in sorted(r["requests"].get("details", {}).items()) if k != "served") or "—")
    row("served latency p50 / p99", lambda r: "—" if not r.get("served_latency_s") else
        f"{r['served_latency_s']['p50']:.2f} s / {r['served_latency_s']['p99']:.2f} s")
    row("neighbour held at the end", lambda r: _gib(r.get("neighbour_held_bytes")))
    row("highest NVML used", lambda r: _pct(r.get("highest_nvml_used_frac")))
    row("lowest free, highest ratio", lambda r: f"{_gib(r.get('lowest_free_bytes'))}, {_num(r.get('highest_ratio'))}")
    return lines


def series_table(rows: list[dict[str, Any]], around: float | None, before: float = 6.0, after: float = 1.0,
                 limit: int = 16) -> list[str]:
    """A compact table of the rows from around − before to around + after (the last rows without an OOM)."""
    if around is None:
        pick = rows[-limit:]
    else:
        pick = [r for r in rows if around - before <= r["t_s"] <= around + after][-limit:]
    head = ("| t s | NVML used | free | ratio | reserved | inactive split | neighbour | running | waiting | "
            "gk level | gk window | served | refused | failed |")
    lines = [head, "|" + " ---: |" * 14]
    for r in pick:
        lines.append("| " + " | ".join([
            f"{r['t_s']:.1f}", _pct(r.get("nvml_used_frac")), _gib(r.get("free_bytes")), _num(r.get("ratio")),
            _gib(r.get("reserved_bytes")), _gib(r.get("inactive_split_bytes")), _gib(r.get("neighbour_bytes")),
            _num(r.get("running"), "{:.0f}"), _num(r.get("waiting"), "{:.0f}"), str(r.get("gk_level") or "—"),
            _num(r.get("gk_window"), "{}"), str(r.get("served")), str(r.get("refused")), str(r.get("failed"))]) + " |")
    return lines


def verdict(runs: list[dict[str, Any]]) -> list[str]:
    """Plain sentences on what happened; no figure is claimed that the runs did not produce."""
    out = []
    by = {r["run"]: r for r in runs}
    u, g = by.get("unprotected"), by.get("gatekeeper")
    for r in runs:
        if not r.get("started"):
            out.append(f"The {r['run']} run did not start (see the notes): it shows nothing.")
    if u is not None and u.get("started"):
        if u["oom"]:
            out.append(f"The unprotected run ran out of memory at {u['death']['at_s']:.1f} s with NVML showing "
                       f"{_pct(u.get('nvml_used_frac_at_death'))} of the device used.")
        elif u.get("engine_died"):
            out.append("The unprotected run's engine died of an error that is not an out-of-memory; see the table.")
        else:
            out.append("The unprotected run did not run out of memory within its cap: this run shows no OOM to "
                       "prevent, and the comparison below says nothing about prevention.")
    if g is None:
        out.append("No run through gatekeeper was made (no gatekeeper binary).")
    elif not g.get("started"):
        pass
    elif g["oom"]:
        out.append(f"The run through gatekeeper ran out of memory too, at {g['death']['at_s']:.1f} s.")
    elif not g.get("engine_died"):
        out.append("The run through gatekeeper had no OOM within its cap.")
    return out


def _settings_lines(summary: dict[str, Any], plan: dict[str, Any]) -> list[str]:
    st = summary["settings"]
    e, ld, nb, m = st["engine"], st["load"], st["neighbour"], st["model"]
    bursts = ", ".join(f"{q:g}/s at {a:g}-{a + b:g} s" for a, b, q in ld["bursts"])
    mix = ", ".join(f"{100 * s:g} % {lo}-{hi}" for s, lo, hi in ld["prompt_mix"])
    nmix = ", ".join(f"n={n} on {100 * s:g} %" for n, s in ld["n_mix"])
    return [
        f"- **Engine** (`scripts/gpu/oom_server.py`): {m['name']}'s shapes, {_gib(plan.get('weight_bytes'))} of "
        f"random stand-in weights; gpu_memory_utilization {e['gpu_memory_utilization']}, max_num_seqs "
        f"{e['max_num_seqs']}, max_num_batched_tokens {e['max_num_batched_tokens']}, block_size {e['block_size']}, "
        f"eager (no CUDA graphs, so no graph estimate). Plan at boot: persistent input buffers "
        f"{_gib(plan.get('persistent_bytes'))} (outside the plan), profile peak "
        f"{_gib(plan.get('profile_peak_bytes'))} (with the sampler's Triton buffer, "
        f"{_gib(plan.get('triton_bytes'))}, kept), non-torch increase "
        f"{_gib(plan.get('non_torch_increase_bytes'))}, KV cache {_gib(plan.get('kv_bytes'))} "
        f"({plan.get('kv_tokens', '—')} tokens), driver free after boot (the warm-up's blocks cached) "
        f"{_gib(plan.get('driver_free_after_boot_bytes'))} of {_gib(plan.get('total_bytes'))}.",
        f"- **Neighbour** (a second process on the GPU): from {nb['start_s']:g} s, every {nb['every_s']:g} s, "
        f"{100 * nb['step_frac']:g} % of the device while NVML's free memory stays at or above "
        f"{100 * nb['floor_frac']:g} %.",
        f"- **Load**: seed {ld['seed']}, {ld['duration_s']:g} s, {st['requests']} requests: {ld['base_qps']:g}/s, "
        f"bursts {bursts}; prompts {mix} tokens; max_tokens {ld['max_tokens'][0]}-{ld['max_tokens'][1]}; "
        f"top_p 0.9 on {100 * ld['top_p_share']:g} %; {nmix}; prompt_logprobs on "
        f"{100 * ld['prompt_logprobs_share']:g} %; no retries.",
        f"- **gatekeeper**: enforce; sources `vllm` (the server's /metrics) and `memory_blocks` (the exporter); "
        f"vocab_size {m['vocab']}, batch.memory_share {st['memory_share']}, estimate.prompt_logprobs_chunk "
        f"{e['max_num_batched_tokens']}; config.yaml's defaults otherwise, among them queue.ttft_deadline 1.5 s "
        f"(a request that cannot start within it gets 503 deadline) and fast_breaker qps 80 "
        f"(`oom/gatekeeper/gatekeeper/policy.yaml`).",
        f"- **Runs**: fresh processes each, at most {st['run_cap_s']:g} s from the first arrival"
        + (" (cut short by the budget: fewer arrivals than the load lists)" if st.get("cut_short") else "")
        + "; a run stops at the engine's death.",
    ]


def render_markdown(summary: dict[str, Any], series: dict[str, list[dict[str, Any]]]) -> str:
    """GPU-RESULTS.md for bench/: settings, the runs side by side, the series around the OOM, how to read it."""
    runs = summary["runs"]
    srv = next((r.get("server") for r in runs if r.get("server")), None) or {}
    plan = srv.get("plan") or {}
    out = ["# GPU results: an engine OOM with and without gatekeeper", ""]
    if summary["dry_run"]:
        out += ["**DRY RUN on a fake GPU (`scripts/gpu/fake_gpu.py`): a check of the orchestration, not a "
                "measurement. No figure below describes a real GPU.**", ""]
    conf = ", ".join(f"{k}={v}" for k, v in (srv.get("alloc_conf") or {}).items() if v) or "unset"
    out += [f"Run by `scripts/gpu/check.sh` (step `oom`: `scripts/gpu/vllm_like.py`) on {summary['date_utc']}; "
            f"device {srv.get('device', '—')} ({_gib(plan.get('total_bytes'))}); torch {srv.get('torch', '—')}, "
            f"CUDA {srv.get('cuda', '—')}; allocator configuration {conf}. NVML's used fraction is read with "
            f"{summary['nvml_source']}.", ""]
    out += ["## Settings", ""] + _settings_lines(summary, plan) + [""]
    out += ["## The runs", ""] + verdict(runs) + [""]
    out += compare_table(runs) if runs else ["No run was made."]
    for line in summary.get("skipped", []):
        out.append(f"\n- {line}")
    for r in runs:
        for note in r.get("notes", []):
            out.append(f"\n- {r['run']}: {note}")
    unprot = next((r for r in runs if r["run"] == "unprotected" and r.get("death")), None)
    out += ["", "## The series around the OOM", ""]
    for r in runs:
        around = (r.get("death") or {}).get("at_s", (unprot or {}).get("death", {}).get("at_s"))
        where = f"{around - 6:.1f} to {around + 1:.1f} s" if around is not None else "the last rows"
        out += [f"**{r['run']}** ({where}; every row in `oom-series-{r['run']}.csv`):", ""]
        out += series_table(series.get(r["run"], []), around) + [""]
    out += ["## How to read it", "",
            "- *NVML used* is the device's used fraction as NVML (or cudaMemGetInfo) sees it: both processes, "
            "every cached block. *free* and *ratio* are the exporter's `free_bytes` and gatekeeper's ratio "
            "(free ÷ largest free block, 1 = all free memory is one block). *inactive split* is memory stranded "
            "in split segments (PyTorch's `inactive_split_bytes`).",
            "- *exporter at the OOM* is what the exporter in the engine computed at the moment of the failed "
            "allocation; *last reported* is what the series last read from it before (what gatekeeper could "
            "have seen).",
            "- *refused* are gatekeeper's own 429/503 answers (by `X-Gatekeeper-Reason`); *failed* are 500s "
            "from the dead engine, connection errors and timeouts; *unfinished* were in flight at the end.",
            "- A run without an OOM says nothing about prevention unless the unprotected run had one."]
    return "\n".join(out) + "\n"
