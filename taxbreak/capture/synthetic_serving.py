"""Synthetic co-batched serving workloads with known per-request costs: the ground truth of the per-request latency
attribution (docs/method.md, "Per-request latency attribution").

SYNTHETIC DATA. Nothing here was measured. A continuous-batching scheduler (``schedule``, also used by the real
serving loop in ``taxbreak.capture.serving``) runs requests of different prompt and output lengths from several
tenants; each step's latency is the sum of its requests' true costs under a known two-segment LLMVisor model
per phase (``PhaseTruth``; a mixed step is its prefill part plus its decode part plus a shared constant, as
in docs/method.md section 8: ``mixed_shares``), times lognormal noise. The true cost of each request in each
step is written into the sidecar (``steps[].requests[].true_cost_ns``), so the attribution can be checked
request by request.

Caveat: the true costs follow the model's own additive form, so this validates the estimator (fit, breakpoint
search, attribution), not whether real hardware follows the form; real captures answer that.

Two scheduling policies (ours, simplified): ``separate`` (SGLang-like: a step is either prefill (EXTEND) or decode,
prefill and decode steps alternate while requests wait) and ``chunked`` (vLLM-like: running requests decode and
waiting prompts fill the rest of the token budget in chunks, so steps are mixed).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

POLICIES = ("separate", "chunked")


# --- requests and the scheduler ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ServedRequest:
    request_id: str
    tenant: str
    prompt_len: int
    output_len: int  # tokens generated, including the one the end of prefill emits
    arrival_step: int = 0


def schedule(requests: list[ServedRequest], *, max_batch_requests: int = 32, max_batch_tokens: int = 4096,
             policy: str = "separate", prefill_only_every: int = 0) -> Iterator[list[dict[str, Any]]]:
    """Yield one list per engine step: the requests in it as sidecar entries (``request_id``, ``tenant``,
    ``phase``, ``tokens`` p_i, ``context_tokens`` c_i, ``output_tokens``). Steps with no work are skipped (the
    scheduler jumps to the next arrival). A prompt longer than the token budget is prefilled in chunks.
    ``prefill_only_every`` (chunked only; 0: never): every k-th step that has prompts to prefill runs them alone,
    the decoding requests waiting (a prefill-first step, so a chunked workload also has pure prefill steps)."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, not {policy!r}")
    if max_batch_requests < 1 or max_batch_tokens < 1:
        raise ValueError("max_batch_requests and max_batch_tokens must be at least 1")
    pending = sorted(requests, key=lambda r: (r.arrival_step, r.request_id))
    waiting: list[ServedRequest] = []
    prefilled: dict[str, int] = {}  # prompt tokens done, for admitted requests still in prefill
    running: dict[str, int] = {}  # generated tokens so far, for requests decoding
    by_id = {r.request_id: r for r in requests}
    if len(by_id) != len(requests):
        raise ValueError("request ids must be unique")
    step = 0
    prompt_steps = 0  # steps so far that had prompts to prefill
    last_was_prefill = False
    while pending or waiting or prefilled or running:
        while pending and pending[0].arrival_step <= step:
            waiting.append(pending.pop(0))
        if not (waiting or prefilled or running):
            step = pending[0].arrival_step
            continue
        # admit waiting requests into prefill while there is room
        while waiting and len(prefilled) + len(running) < max_batch_requests:
            prefilled[waiting.pop(0).request_id] = 0
        batch: list[dict[str, Any]] = []
        do_prefill = bool(prefilled) and (policy == "chunked" or not running or not last_was_prefill)
        prefill_only = False
        if do_prefill and policy == "chunked":
            prompt_steps += 1
            prefill_only = prefill_only_every > 0 and prompt_steps % prefill_only_every == 0
        budget = max_batch_tokens
        if (policy == "chunked" and not prefill_only) or not do_prefill:
            for rid, gen in list(running.items()):
                r = by_id[rid]
                batch.append({"request_id": rid, "tenant": r.tenant, "phase": "decode", "tokens": 1,
                              "context_tokens": r.prompt_len + gen - 1, "output_tokens": 1})
                budget -= 1
        if do_prefill:
            for rid, done in list(prefilled.items()):
                if budget <= 0:
                    break
                r = by_id[rid]
                chunk = min(r.prompt_len - done, budget)
                budget -= chunk
                finished = done + chunk == r.prompt_len
                batch.append({"request_id": rid, "tenant": r.tenant, "phase": "prefill", "tokens": chunk,
                              "context_tokens": done, "output_tokens": 1 if finished else 0})
        # apply the step
        for e in batch:
            rid = e["request_id"]
            r = by_id[rid]
            if e["phase"] == "prefill":
                prefilled[rid] += e["tokens"]
                if prefilled[rid] == r.prompt_len:
                    del prefilled[rid]
                    if r.output_len > 1:
                        running[rid] = 1
            else:
                running[rid] += 1
                if running[rid] >= r.output_len:
                    del running[rid]
        last_was_prefill = any(e["phase"] == "prefill" for e in batch)
        yield batch
        step += 1


def step_phase(batch: list[dict[str, Any]]) -> str:
    phases = {e["phase"] for e in batch}
    return phases.pop() if len(phases) == 1 else "mixed"


# --- the true model ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Segment:
    """Coefficients of one segment, ns per unit: beta, a1 (per token), a2 (per context token), a3 (per token^2),
    a4 (per request)."""

    beta: float
    a1: float
    a2: float
    a3: float
    a4: float

    def shares(self, batch: list[dict[str, Any]]) -> list[float]:
        n = len(batch)
        fixed = (self.beta + self.a4 * n) / n
        return [self.a1 * e["tokens"] + self.a2 * e["context_tokens"] + self.a3 * e["tokens"] ** 2 + fixed
                for e in batch]


@dataclass(frozen=True)
class PhaseTruth:
    breakpoint_tokens: int
    lo: Segment
    hi: Segment

    def segment(self, tokens_sum: int) -> Segment:
        return self.lo if tokens_sum <= self.breakpoint_tokens else self.hi


def _default_truth() -> dict[str, PhaseTruth]:
    # Magnitudes of a small dense model on one data-centre GPU (invented): prefill turns compute-bound past ~1k
    # tokens per step, decode past ~16 requests; decode pays for every cached token it attends to (reading its KV
    # entries: ~45 ns per token at ~3 TB/s for ~128 KiB of KV per token).
    return {
        "prefill": PhaseTruth(1024, Segment(3.0e6, 60.0, 4.0, 0.004, 25_000.0),
                              Segment(1.5e6, 140.0, 4.0, 0.010, 25_000.0)),
        "decode": PhaseTruth(16, Segment(5.0e6, 40_000.0, 45.0, 0.0, 0.0),
                             Segment(3.0e6, 160_000.0, 50.0, 0.0, 0.0)),
    }


@dataclass(frozen=True)
class ServingConfig:
    n_requests: int = 64
    tenants: tuple[str, ...] = ("alpha", "beta", "gamma")
    prompt_len_range: tuple[int, int] = (16, 2048)  # log-uniform
    output_len_range: tuple[int, int] = (2, 96)  # log-uniform
    arrivals_per_step: float = 0.5  # mean new requests per step (exponential gaps)
    max_batch_requests: int = 32
    max_batch_tokens: int = 2048
    policy: str = "separate"
    prefill_only_every: int = 0  # chunked: every k-th step with prompts prefills them alone (schedule)
    noise_sigma: float = 0.02  # lognormal sigma of the step latency around the sum of the true costs
    # A mixed step's cost the two parts share (docs/method.md section 8): one forward pass pays the fixed cost
    # once, not once per phase, so the parts' sum overcounts it (invented magnitude).
    mixed_shared_ns: float = -2.5e6
    model_name: str = "synthetic-serving-dense"
    gpu_name: str = "NVIDIA H100 80GB HBM3"
    seed: int = 0
    truth: dict[str, PhaseTruth] = field(default_factory=_default_truth)

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, not {self.policy!r}")
        if self.n_requests < 1 or not self.tenants:
            raise ValueError("n_requests must be at least 1 and tenants non-empty")

    def label(self) -> str:
        return f"synthetic_serving_{self.policy}_r{self.n_requests}_s{self.seed}"


def _log_uniform(rng: random.Random, lo: int, hi: int) -> int:
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


def make_requests(cfg: ServingConfig) -> list[ServedRequest]:
    rng = random.Random(cfg.seed)
    out, t = [], 0.0
    for i in range(cfg.n_requests):
        out.append(ServedRequest(f"req-{i:05d}", cfg.tenants[rng.randrange(len(cfg.tenants))],
                                 _log_uniform(rng, *cfg.prompt_len_range), _log_uniform(rng, *cfg.output_len_range),
                                 int(t)))
        t += rng.expovariate(cfg.arrivals_per_step) if cfg.arrivals_per_step > 0 else 0.0
    return out


@dataclass
class ServingRun:
    """The simulated run: per step its requests (with ``true_cost_ns``), phase and observed latency."""

    cfg: ServingConfig
    steps: list[list[dict[str, Any]]]
    phases: list[str]
    latency_ns: list[int]
    prefill_fraction: list[float] = field(default_factory=list)  # true prefill part / (prefill + decode parts)


def mixed_shares(truth: dict[str, PhaseTruth], batch: list[dict[str, Any]], shared_ns: float
                 ) -> tuple[list[float], float, float]:
    """The true costs of a step's requests (docs/method.md section 8): each phase's part from its own phase's model
    over its own requests (its segment chosen by that part's sum p), plus the shared constant ``shared_ns`` of a
    mixed step spread over the two parts in proportion to them (so over the requests in proportion to their
    shares). Returns (per-request costs in ``batch`` order, prefill part, decode part), the parts with their share
    of the shared constant."""
    costs = [0.0] * len(batch)
    parts = {"prefill": 0.0, "decode": 0.0}
    for phase in parts:
        idx = [i for i, e in enumerate(batch) if e["phase"] == phase]
        if not idx:
            continue
        part = [batch[i] for i in idx]
        seg = truth[phase].segment(sum(e["tokens"] for e in part))
        for i, c in zip(idx, seg.shares(part), strict=True):
            costs[i] = c
        parts[phase] = sum(costs[i] for i in idx)
    model = parts["prefill"] + parts["decode"]
    if parts["prefill"] and parts["decode"] and model > 0:
        scale = (model + shared_ns) / model
        costs = [c * scale for c in costs]
        parts = {k: v * scale for k, v in parts.items()}
    return costs, parts["prefill"], parts["decode"]


def simulate_serving(cfg: ServingConfig) -> ServingRun:
    rng = random.Random(cfg.seed + 1)
    steps, phases, lat, split = [], [], [], []
    for batch in schedule(make_requests(cfg), max_batch_requests=cfg.max_batch_requests,
                          max_batch_tokens=cfg.max_batch_tokens, policy=cfg.policy,
                          prefill_only_every=cfg.prefill_only_every):
        phase = step_phase(batch)
        costs, pre, dec = mixed_shares(cfg.truth, batch, cfg.mixed_shared_ns)
        for e, share in zip(batch, costs, strict=True):
            e["true_cost_ns"] = round(share)
        total = sum(e["true_cost_ns"] for e in batch)
        steps.append(batch)
        phases.append(phase)
        split.append(pre / (pre + dec) if pre + dec > 0 else float("nan"))
        lat.append(max(1, round(total * math.exp(rng.gauss(0.0, cfg.noise_sigma)))))
    return ServingRun(cfg, steps, phases, lat, split)


# --- writers -------------------------------------------------------------------------------------------------------
def step_name(i: int) -> str:
    return f"serve_step#{i + 1}"


def serving_meta(run: ServingRun, *, synthetic: bool = True) -> dict[str, Any]:
    from taxbreak.capture.profile import META_VERSION

    cfg = run.cfg
    return {
        "taxbreak_meta_version": META_VERSION, "kind": "generation", "model": cfg.model_name, "model_kind": "dense",
        "dtype": "bfloat16", "device": "cuda:0", "gpu_name": cfg.gpu_name, "synthetic": synthetic,
        "output_tokens": sum(e.get("output_tokens") or 0 for b in run.steps for e in b),
        "steps": [{"name": step_name(i), "phase": ph, "tokens": 1, "requests": b}
                  for i, (b, ph) in enumerate(zip(run.steps, run.phases, strict=True))],
        "serving": {"policy": cfg.policy, "requests": cfg.n_requests, "tenants": list(cfg.tenants),
                    "max_batch_requests": cfg.max_batch_requests, "max_batch_tokens": cfg.max_batch_tokens,
                    "noise_sigma": cfg.noise_sigma, "seed": cfg.seed, "mixed_shared_ns": cfg.mixed_shared_ns,
                    "truth": {k: asdict(v) for k, v in cfg.truth.items()}},
    }


def _records(run: ServingRun, start_ns: int) -> Iterator[tuple]:
    """Kineto records (the tuples of taxbreak.capture.synthetic): per step a user annotation spanning the step's
    latency and, inside it, three framework ops each launching one kernel (GEMM, attention, argmax) and a
    synchronising copy, the kernels filling 80% of the step."""
    from taxbreak.capture.synthetic import _kernels

    specs = _kernels(run.cfg.gpu_name)
    t = start_ns + 10_000
    corr, ext = 1000, 100
    for i, (phase, lat) in enumerate(zip(run.phases, run.latency_ns, strict=True)):
        ext += 1
        step_ext = ext
        gpu_t = t + 12_000
        work = max(3, int(lat * 0.8) - 12_000)
        parts = (("aten::mm", "gemm", 0.55), ("aten::_scaled_dot_product_flash_attention",
                                               "attn_prefill" if phase != "decode" else "attn_decode", 0.40),
                 ("aten::argmax", "argmax", 0.05))
        host = t + 1_000
        for op, kern, frac in parts:
            ext += 1
            corr += 1
            yield ("op", op, host, 5_000, ext)
            yield ("rt", "cudaLaunchKernel", "cuda_runtime", host + 1_500, 2_500, corr, ext)
            dur = max(1, int(work * frac))
            yield ("k", specs[kern], max(gpu_t, host + 6_000), dur, corr, ext, 0)
            gpu_t = max(gpu_t, host + 6_000) + dur
            host += 6_000
        ext += 1
        corr += 1
        end = t + lat
        sync_ts = min(host, end - 2)
        yield ("op", "aten::item", sync_ts, max(1, end - 1 - sync_ts), ext)
        yield ("rt", "cudaStreamSynchronize", "cuda_runtime", sync_ts + 1, max(1, end - 2 - sync_ts), corr, ext)
        yield ("ann", step_name(i), t, lat, step_ext)
        t = end + 20_000


def write_serving_kineto(run: ServingRun, path: str | Path) -> Path:
    """Write the run as a Kineto JSON trace (``.json`` / ``.json.gz``) plus its sidecar; returns the path."""
    from taxbreak.capture.synthetic import MONO_START_NS, _write_kineto_file

    return _write_kineto_file(Path(path), serving_meta(run), _records(run, MONO_START_NS), run.cfg.gpu_name,
                              run.cfg.seed)


def generate_synthetic_serving(out_dir: str | Path, cfg: ServingConfig, gzip_json: bool = True) -> Path:
    run = simulate_serving(cfg)
    name = cfg.label() + (".json.gz" if gzip_json else ".json")
    return write_serving_kineto(run, Path(out_dir) / name)


def run_tables(run: ServingRun, trace_id: str = "synthetic") -> tuple[Any, Any, Any]:
    """The run as arrow tables shaped like the warehouse's ``serving_steps`` (fit-ready, no kernels: device time
    = 80% of latency, orchestration 0) and ``serving_step_requests``, plus the truth per (step, request):
    (steps, requests, truth). For benchmarks and tests that skip the trace files."""
    import numpy as np
    import pyarrow as pa

    n = len(run.steps)
    sizes = np.fromiter((len(b) for b in run.steps), dtype=np.int64, count=n)
    flat = [e for b in run.steps for e in b]
    step_of = np.repeat(np.arange(1, n + 1, dtype=np.int64), sizes)
    tok = np.fromiter((e["tokens"] for e in flat), dtype=np.int64, count=len(flat))
    ctx = np.fromiter((e["context_tokens"] for e in flat), dtype=np.int64, count=len(flat))
    is_pre = np.fromiter((e["phase"] == "prefill" for e in flat), dtype=bool, count=len(flat))
    idx = np.cumsum(sizes) - sizes

    def per_step(v: np.ndarray) -> np.ndarray:
        return np.add.reduceat(v, idx) if len(v) else np.zeros(n, dtype=np.int64)

    lat = np.asarray(run.latency_ns, dtype=np.int64)
    pre_n = per_step(is_pre.astype(np.int64))
    pre_tok, dec_tok = per_step(np.where(is_pre, tok, 0)), per_step(np.where(is_pre, 0, tok))
    starts = np.concatenate([[0], np.cumsum(lat + 20_000)[:-1]]).astype(np.int64)
    steps = pa.table({
        "trace_id": pa.array([trace_id] * n), "step_id": np.arange(1, n + 1, dtype=np.int64),
        "step_name": pa.array([step_name(i) for i in range(n)]),
        "composition_source": pa.array(["sidecar"] * n), "has_request_detail": np.ones(n, dtype=bool),
        "model_name": pa.array([run.cfg.model_name] * n), "gpu_name": pa.array([run.cfg.gpu_name] * n),
        "phase": pa.array(run.phases), "pid": pa.array(["1"] * n), "step_ts_ns": starts, "step_end_ns": starts + lat,
        "batch_requests": sizes, "prefill_requests": pre_n, "decode_requests": sizes - pre_n,
        "tokens_sum": per_step(tok), "tokens_sq_sum": per_step(tok * tok), "context_sum": per_step(ctx),
        "prefill_tokens_sum": pre_tok, "prefill_tokens_sq_sum": per_step(np.where(is_pre, tok * tok, 0)),
        "prefill_context_sum": per_step(np.where(is_pre, ctx, 0)), "decode_tokens_sum": dec_tok,
        "decode_tokens_sq_sum": per_step(np.where(is_pre, 0, tok * tok)),
        "decode_context_sum": per_step(np.where(is_pre, 0, ctx)),
        "kernels": np.zeros(n, dtype=np.int64), "device_active_ns": (lat * 8) // 10,
        "t_orchestrate_ns": np.zeros(n, dtype=np.int64), "latency_ns": lat, "fit_ready": np.ones(n, dtype=bool),
        "unfit_reason": pa.nulls(n, pa.string()),
    })
    reqs = pa.table({
        "trace_id": pa.array([trace_id] * len(flat)), "step_id": step_of,
        "request_id": pa.array([e["request_id"] for e in flat]), "tenant": pa.array([e["tenant"] for e in flat]),
        "request_phase": pa.array([e["phase"] for e in flat]), "tokens": tok, "context_tokens": ctx,
        "output_tokens": np.fromiter((e["output_tokens"] for e in flat), dtype=np.int64, count=len(flat)),
    })
    truth = pa.table({
        "trace_id": pa.array([trace_id] * len(flat)), "step_id": step_of,
        "request_id": reqs.column("request_id"),
        "true_cost_ns": np.fromiter((e["true_cost_ns"] for e in flat), dtype=np.int64, count=len(flat)),
    })
    return steps, reqs, truth


def step_truth_table(run: ServingRun, trace_id: str = "synthetic") -> Any:
    """Per step the true prefill fraction of the step's cost (prefill part / (prefill + decode parts), each with its
    share of a mixed step's shared constant; 1 in a prefill step, 0 in a decode step): the truth of the per-step
    split in ``request_step_fit``."""
    import numpy as np
    import pyarrow as pa

    n = len(run.steps)
    return pa.table({"trace_id": pa.array([trace_id] * n), "step_id": np.arange(1, n + 1, dtype=np.int64),
                     "true_prefill_fraction": np.asarray(run.prefill_fraction, dtype=np.float64)})
