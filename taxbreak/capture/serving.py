"""A small serving loop to profile: continuous batching of co-scheduled requests of different prompt and output
lengths over the built-in models (``taxbreak.capture.models``), on CPU or GPU.

Each engine step packs the tokens of every request in the batch into one sequence (as vLLM and SGLang do): the
embedding, the q/k/v/o projections, the MLP (or MoE block) and the LM head run once over all of them, attention runs
per request over its own KV cache (causal over a prefill chunk, offset by the tokens already cached). The step is
marked ``record_function("serve_step#N")`` and ends with the next tokens copied to the host (a sync, as engines do
to schedule the next step). The scheduler is ``taxbreak.capture.synthetic_serving.schedule`` (policies
``separate``: prefill and decode steps alternate, SGLang-like; ``chunked``: decode plus prompt chunks in one step,
vLLM-like). The sidecar lists every step's requests (``steps[].requests[]``, docs/sidecar.md): what
``serving_steps`` and the per-request attribution read.

torch is imported inside the functions.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from taxbreak.capture.profile import DTYPES, CaptureError, base_meta, require_torch, write_meta
from taxbreak.capture.synthetic_serving import (
    POLICIES,
    ServedRequest,
    ServingConfig,
    make_requests,
    schedule,
    step_name,
    step_phase,
)


class _ReqState:
    def __init__(self, n_layers: int, prompt: Any) -> None:
        self.keys: list[Any] = [None] * n_layers
        self.values: list[Any] = [None] * n_layers
        self.prompt = prompt  # token ids [prompt_len]
        self.last_token: Any = None

    def update(self, layer: int, k: Any, v: Any) -> tuple[Any, Any]:
        import torch

        if self.keys[layer] is not None:
            k = torch.cat([self.keys[layer], k], dim=1)
            v = torch.cat([self.values[layer], v], dim=1)
        self.keys[layer], self.values[layer] = k, v
        return k, v


def packed_step(model: Any, items: list[tuple[_ReqState, Any]]) -> Any:
    """One engine step over ``items`` (request state, its input token ids [s_i]); returns the logits of each
    request's last input token, [len(items), vocab]."""
    import torch
    from torch.nn import functional as F  # noqa: N812

    sizes = [int(ids.shape[0]) for _, ids in items]
    x = model.embed(torch.cat([ids for _, ids in items]))  # [T, h]
    hidden = x.shape[-1]
    for li, layer in enumerate(model.layers):
        attn = layer.attn
        h = layer.input_norm(x)
        q, k, v = attn.q_proj(h), attn.k_proj(h), attn.v_proj(h)
        outs, off = [], 0
        for (st, _), s in zip(items, sizes, strict=True):
            ctx = 0 if st.keys[li] is None else int(st.keys[li].shape[1])  # tokens cached before this step
            qi, ki, vi = (t[off:off + s].view(s, attn.n_heads, attn.head_dim).transpose(0, 1) for t in (q, k, v))
            kk, vv = st.update(li, ki, vi)
            if s == 1:
                o = F.scaled_dot_product_attention(qi, kk, vv)
            elif ctx == 0:
                o = F.scaled_dot_product_attention(qi, kk, vv, is_causal=True)
            else:  # a later prompt chunk: causal, offset by the tokens already cached
                mask = torch.ones(s, ctx + s, dtype=torch.bool, device=qi.device).tril(diagonal=ctx)
                o = F.scaled_dot_product_attention(qi, kk, vv, attn_mask=mask)
            outs.append(o.transpose(0, 1).reshape(s, hidden))
            off += s
        x = x + attn.o_proj(torch.cat(outs))
        x = x + layer.mlp(layer.post_norm(x).unsqueeze(0)).squeeze(0)
    last = torch.tensor([sum(sizes[: i + 1]) - 1 for i in range(len(sizes))], device=x.device)
    return model.lm_head(model.norm(x[last]))


def serve(model: Any, requests: list[ServedRequest], *, max_batch_requests: int, max_batch_tokens: int,
          policy: str, vocab: int, device: str, seed: int = 0, annotate: bool = True) -> list[list[dict[str, Any]]]:
    """Run the requests to completion; returns the steps' compositions (sidecar ``requests`` entries)."""
    import torch
    from torch.profiler import record_function

    gen = torch.Generator().manual_seed(seed)
    states = {r.request_id: _ReqState(len(model.layers), torch.randint(0, vocab, (r.prompt_len,), generator=gen)
                                      .to(device)) for r in requests}
    steps = []
    for i, batch in enumerate(schedule(requests, max_batch_requests=max_batch_requests,
                                       max_batch_tokens=max_batch_tokens, policy=policy)):
        items = []
        for e in batch:
            st = states[e["request_id"]]
            if e["phase"] == "prefill":
                ids = st.prompt[e["context_tokens"]:e["context_tokens"] + e["tokens"]]
            else:
                ids = st.last_token.view(1)
            items.append((st, ids))
        ctx = record_function(step_name(i)) if annotate else _null()
        with ctx:
            logits = packed_step(model, items)
            nxt = logits.argmax(dim=-1).tolist()  # to the host: the scheduler needs them (a sync on a GPU)
        for (st, _), tok in zip(items, nxt, strict=True):
            st.last_token = torch.tensor(tok, device=device)
        steps.append(batch)
    return steps


class _null:  # noqa: N801 - a context manager that does nothing
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def capture_serving(
    out: str | os.PathLike[str], *, model: str = "dense", n_requests: int = 16,
    prompt_len_range: tuple[int, int] = (4, 64), output_len_range: tuple[int, int] = (2, 16),
    tenants: tuple[str, ...] = ("alpha", "beta"), arrivals_per_step: float = 1.0, max_batch_requests: int = 8,
    max_batch_tokens: int = 128, policy: str = "chunked", dtype: str = "float32", device: str | None = None,
    model_config: dict[str, Any] | None = None, warmup: bool = True, seed: int = 0,
) -> Path:
    """Profile the serving loop over a built-in model and write ``out`` (Kineto JSON) plus its sidecar."""
    torch = require_torch()
    from torch.profiler import ProfilerActivity, profile

    from taxbreak.capture.models import ModelConfig, build_model

    if model not in ("dense", "moe"):
        raise CaptureError(f"the serving loop runs the built-in models only ('dense', 'moe'), not {model!r}")
    if policy not in POLICIES:
        raise CaptureError(f"policy must be one of {POLICIES}, not {policy!r}")
    if dtype not in DTYPES:
        raise CaptureError(f"dtype must be one of {DTYPES}, not {dtype!r}")
    if n_requests < 1 or max_batch_requests < 1 or max_batch_tokens < 1:
        raise CaptureError("requests, max batch requests and max batch tokens must be at least 1")
    if min(prompt_len_range) < 1 or min(output_len_range) < 1:
        raise CaptureError("prompt and output lengths must be at least 1")
    cuda = torch.cuda.is_available()
    device = device or ("cuda" if cuda else "cpu")
    if device.startswith("cuda") and not cuda:
        raise CaptureError("device 'cuda' was asked for but torch sees no CUDA GPU")
    cfg = ModelConfig(kind=model, **dict(model_config or {}))
    net = build_model(cfg, dtype=getattr(torch, dtype), device=device)
    scfg = ServingConfig(n_requests=n_requests, tenants=tenants, prompt_len_range=prompt_len_range,
                         output_len_range=output_len_range, arrivals_per_step=arrivals_per_step,
                         max_batch_requests=max_batch_requests, max_batch_tokens=max_batch_tokens, policy=policy,
                         seed=seed)
    reqs = make_requests(scfg)
    if max(r.prompt_len + r.output_len for r in reqs) > cfg.max_positions:
        raise CaptureError(f"a request is longer than the model's {cfg.max_positions} positions")
    kw = {"max_batch_requests": max_batch_requests, "max_batch_tokens": max_batch_tokens, "policy": policy,
          "vocab": cfg.vocab, "device": device, "seed": seed}
    out_path = Path(out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with torch.inference_mode():
        if warmup:
            serve(net, reqs[: min(4, len(reqs))], annotate=False, **kw)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
        with profile(activities=activities, record_shapes=True) as prof:
            steps = serve(net, reqs, **kw)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
    prof.export_chrome_trace(str(out_path))
    gpu_name = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else None
    meta = base_meta("generation", device=device, gpu_name=gpu_name)
    meta.update(
        model=f"builtin-{cfg.describe().replace(' ', '-')}", model_kind=model, dtype=dtype,
        output_tokens=sum(e["output_tokens"] for b in steps for e in b),
        steps=[{"name": step_name(i), "phase": step_phase(b), "tokens": 1, "requests": b} for i, b in enumerate(steps)],
        warmup_runs=1 if warmup else 0, measured_runs=1,
        serving={"policy": policy, "requests": n_requests, "tenants": list(tenants),
                 "max_batch_requests": max_batch_requests, "max_batch_tokens": max_batch_tokens,
                 "prompt_len_range": list(prompt_len_range), "output_len_range": list(output_len_range),
                 "seed": seed},
    )
    write_meta(out_path, meta)
    return out_path
