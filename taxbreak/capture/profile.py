"""Profile greedy generation with ``torch.profiler`` and write the run's facts next to (and into) the trace.

The measured run is one ``generate`` call: the prefill forward inside ``record_function("prefill")`` and each
decode step inside ``record_function("decode_step#i")`` (i from 1). ``output_tokens`` m counts every generated
token, including the one the prefill produces, so a run has 1 prefill and m - 1 decode steps.

Warm-up: ``warmup_runs`` unprofiled runs, then the profiler's own warm-up cycle (``schedule(warmup=1)``: the
profiler is armed but its events are discarded), then one measured cycle, the only one in the trace. The
metadata's ``warmup_runs`` counts both kinds of warm-up.

torch is imported inside the functions, so ``import taxbreak.capture.profile`` works without it.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import platform
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taxbreak.ingest.sidecar import META_VERSION, MetaError, sidecar_path, validate_meta  # the one sidecar schema

META_KEY = "taxbreak"
DTYPES = ("float32", "bfloat16", "float16")


class CaptureError(Exception):
    """A capture cannot run as asked (missing dependency, no GPU, bad model path). The message says why."""


def require_torch() -> Any:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - the test environment has torch
        raise CaptureError(
            "torch is not installed: the capture tools need it (pip install 'taxbreak[capture]')"
        ) from exc
    return torch


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def host_name() -> str:
    return socket.gethostname()


def steps_for(output_tokens: int) -> list[dict[str, Any]]:
    """The step list of a generation of ``output_tokens`` tokens: prefill, then decode_step#1..m-1."""
    steps: list[dict[str, Any]] = [{"name": "prefill", "phase": "prefill", "tokens": 1}]
    steps += [{"name": f"decode_step#{i}", "phase": "decode", "tokens": 1} for i in range(1, output_tokens)]
    return steps


def base_meta(kind: str, *, device: str, gpu_name: str | None, synthetic: bool = False) -> dict[str, Any]:
    """The fields every kind of sidecar shares; torch versions are filled in when torch is importable."""
    torch_version: str | None = None
    cuda_version: str | None = None
    with contextlib.suppress(ImportError):
        import torch

        torch_version = torch.__version__
        cuda_version = torch.version.cuda
    return {
        "taxbreak_meta_version": META_VERSION,
        "kind": kind,
        "model": None,
        "model_kind": None,
        "dtype": None,
        "device": device,
        "gpu_name": gpu_name,
        "cpu_name": cpu_name(),
        "batch_size": None,
        "prompt_len": None,
        "output_tokens": None,
        "steps": [],
        "torch_version": torch_version,
        "cuda_version": cuda_version,
        "warmup_runs": 0,
        "measured_runs": 1,
        "synthetic": synthetic,
        "host_name": host_name(),
        "sweep": None,
    }


def _open_json(path: Path, mode: str) -> Any:
    if path.name.endswith(".gz"):
        return gzip.open(path, mode + "t", encoding="utf-8")
    return open(path, mode, encoding="utf-8")


def write_meta(trace_path: str | os.PathLike[str], meta: dict[str, Any]) -> Path:
    """Embed ``meta`` in the trace's top-level object under ``"taxbreak"`` and write the sidecar; returns it.

    The trace is loaded and rewritten whole: fine for the small traces the capture tools write (the
    synthetic generator writes its metadata while streaming instead).
    """
    p = Path(trace_path)
    _validate(meta, str(p))
    with _open_json(p, "r") as fh:
        doc = json.load(fh)
    if not isinstance(doc, dict):
        raise CaptureError(f"{p}: the exported trace is not a JSON object")
    doc[META_KEY] = meta
    tmp = p.with_name(p.name + ".tmp" + (".gz" if p.name.endswith(".gz") else ""))
    with _open_json(tmp, "w") as fh:
        json.dump(doc, fh)
    os.replace(tmp, p)
    side = sidecar_path(p)
    side.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return side


def _validate(meta: dict[str, Any], where: str) -> None:
    """Check ``meta`` against the sidecar schema (taxbreak.ingest.sidecar)."""
    try:
        validate_meta(meta, where)
    except MetaError as exc:
        raise CaptureError(f"the metadata written by the capture tool is invalid: {exc}") from exc


@dataclass
class Runner:
    """What generation needs from a model: a name, its kind, and ``step(ids, state) -> (logits, state)``."""

    name: str
    model_kind: str
    vocab: int
    step: Callable[[Any, Any], tuple[Any, Any]]
    new_state: Callable[[], Any]


def _builtin_runner(kind: str, cfg_overrides: dict[str, Any], dtype: Any, device: str) -> Runner:
    from taxbreak.capture.models import ModelConfig, build_model

    cfg = ModelConfig(kind=kind, **cfg_overrides)
    model = build_model(cfg, dtype=dtype, device=device)

    def step(ids: Any, cache: Any) -> tuple[Any, Any]:
        return model(ids, cache), cache

    return Runner(f"builtin-{cfg.describe().replace(' ', '-')}", kind, cfg.vocab, step, model.new_cache)


def _hf_runner(path: str, dtype: Any, device: str) -> Runner:
    try:
        import transformers
    except ImportError as exc:
        raise CaptureError(
            f"{path!r} is not a built-in model (dense, moe) and transformers is not installed, "
            "so a local Hugging Face model cannot be loaded"
        ) from exc
    if not Path(path).is_dir():
        raise CaptureError(f"{path}: not a local model folder (nothing is downloaded: give a local path)")
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(path, local_files_only=True, torch_dtype=dtype)
    except OSError as exc:
        raise CaptureError(f"{path}: cannot load a causal LM from this folder: {exc}") from exc
    model = model.to(device).eval()
    conf = model.config
    moe_keys = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
    is_moe = any(int(getattr(conf, k, 0) or 0) > 1 for k in moe_keys)

    def step(ids: Any, past: Any) -> tuple[Any, Any]:
        out = model(input_ids=ids, past_key_values=past, use_cache=True)
        return out.logits, out.past_key_values

    return Runner(Path(path).name, "moe" if is_moe else "dense", int(conf.vocab_size), step, lambda: None)


def load_runner(model: str, dtype: Any, device: str, cfg_overrides: dict[str, Any] | None = None) -> Runner:
    """``dense`` / ``moe`` (built-in, random weights) or the path of a local Hugging Face model."""
    if model in ("dense", "moe"):
        return _builtin_runner(model, dict(cfg_overrides or {}), dtype, device)
    return _hf_runner(model, dtype, device)


def generate(runner: Runner, input_ids: Any, output_tokens: int) -> Any:
    """Greedy generation of ``output_tokens`` tokens with step markers; returns the tokens [batch, m]."""
    import torch
    from torch.profiler import record_function

    state = runner.new_state()
    with record_function("prefill"):
        logits, state = runner.step(input_ids, state)
        token = logits[:, -1, :].argmax(dim=-1, keepdim=True)
    tokens = [token]
    for i in range(1, output_tokens):
        with record_function(f"decode_step#{i}"):
            logits, state = runner.step(token, state)
            token = logits[:, -1, :].argmax(dim=-1, keepdim=True)
        tokens.append(token)
    return torch.cat(tokens, dim=1)


@contextlib.contextmanager
def _maybe_nvtx(enabled: bool) -> Iterator[None]:
    if not enabled:
        yield
        return
    import torch

    with torch.autograd.profiler.emit_nvtx(record_shapes=True):
        yield


def capture_generation(
    out: str | os.PathLike[str],
    *,
    model: str = "dense",
    batch_size: int = 1,
    prompt_len: int = 16,
    output_tokens: int = 4,
    dtype: str = "float32",
    device: str | None = None,
    warmup_runs: int = 1,
    with_stack: bool = False,
    nvtx: bool = False,
    model_config: dict[str, Any] | None = None,
    sweep: dict[str, Any] | None = None,
    seed: int = 0,
    host_delay_ns: int = 0,
) -> Path:
    """Profile one greedy generation and write ``out`` (.json or .json.gz) plus its sidecar; returns ``out``.

    ``host_delay_ns``: busy-wait that long before every aten op (``taxbreak.capture.host_delay``; the what-if
    replay's ground truth); recorded in the sidecar as ``host_delay_ns``."""
    torch = require_torch()
    from torch.profiler import ProfilerActivity, profile, schedule

    if output_tokens < 1:
        raise CaptureError("output_tokens must be at least 1 (the prefill produces the first token)")
    if batch_size < 1 or prompt_len < 1:
        raise CaptureError("batch_size and prompt_len must be at least 1")
    if dtype not in DTYPES:
        raise CaptureError(f"dtype must be one of {DTYPES}, not {dtype!r}")
    cuda = torch.cuda.is_available()
    device = device or ("cuda" if cuda else "cpu")
    if device.startswith("cuda") and not cuda:
        raise CaptureError("device 'cuda' was asked for but torch sees no CUDA GPU")
    if nvtx and not device.startswith("cuda"):
        raise CaptureError("--nvtx (emit_nvtx ranges for Nsight Systems) needs a CUDA device")
    torch_dtype = getattr(torch, dtype)
    runner = load_runner(model, torch_dtype, device, model_config)

    gen = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, runner.vocab, (batch_size, prompt_len), generator=gen).to(device)

    from taxbreak.capture.host_delay import host_delay

    def run_once() -> None:
        with host_delay(host_delay_ns):
            generate(runner, input_ids, output_tokens)
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    out_path = Path(out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    exported: list[Path] = []

    def on_ready(prof: Any) -> None:
        prof.export_chrome_trace(str(out_path))
        exported.append(out_path)

    with torch.inference_mode():
        for _ in range(warmup_runs):
            run_once()
        sched = schedule(wait=0, warmup=1, active=1, repeat=1)
        with (
            _maybe_nvtx(nvtx),
            profile(
                activities=activities, schedule=sched, on_trace_ready=on_ready, record_shapes=True,
                with_stack=with_stack,
            ) as prof,
        ):
            for _ in range(2):  # the profiler's warm-up cycle, then the measured one
                run_once()
                prof.step()
    if not exported:
        raise CaptureError("torch.profiler produced no trace (the measured cycle did not complete)")

    gpu_name = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else None
    meta = base_meta("generation", device=device, gpu_name=gpu_name)
    meta.update(
        model=runner.name,
        model_kind=runner.model_kind,
        dtype=dtype,
        batch_size=batch_size,
        prompt_len=prompt_len,
        output_tokens=output_tokens,
        steps=steps_for(output_tokens),
        warmup_runs=warmup_runs + 1,
        measured_runs=1,
        sweep=sweep,
    )
    if host_delay_ns:
        meta["host_delay_ns"] = host_delay_ns
    write_meta(out_path, meta)
    return out_path
