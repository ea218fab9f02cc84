"""``taxbreak capture ...``: the argparse wiring of the capture tools (torch is imported only when one runs)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from taxbreak.capture.profile import DTYPES, CaptureError


def _ints(text: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not vals or any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return vals


def _strs(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _model_config(args: argparse.Namespace) -> dict[str, int]:
    keys = ("n_layers", "hidden", "n_heads", "ffn_hidden", "vocab", "n_experts", "top_k", "expert_ffn_hidden")
    return {k: getattr(args, k) for k in keys if getattr(args, k, None) is not None}


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="dense",
                   help="'dense' or 'moe' (built-in, random weights, no download) or a local Hugging Face model "
                   "folder (needs transformers; never fetched)")
    p.add_argument("--dtype", default="float32", choices=DTYPES, help="model dtype (default float32)")
    p.add_argument("--device", help="cpu or cuda[:N] (default: cuda when available, else cpu)")
    p.add_argument("--warmup", type=int, default=1, help="unprofiled warm-up runs before the profiled ones")
    p.add_argument("--with-stack", action="store_true", help="record Python stacks (bigger traces)")
    p.add_argument("--nvtx", action="store_true", help="also emit NVTX ranges (emit_nvtx) for Nsight Systems")
    g = p.add_argument_group("built-in model sizes")
    g.add_argument("--layers", dest="n_layers", type=int, help="decoder layers (default 2)")
    g.add_argument("--hidden", type=int, help="hidden size (default 64)")
    g.add_argument("--heads", dest="n_heads", type=int, help="attention heads (default 4)")
    g.add_argument("--ffn", dest="ffn_hidden", type=int, help="dense MLP width (default 128)")
    g.add_argument("--vocab", type=int, help="vocabulary size (default 256)")
    g.add_argument("--experts", dest="n_experts", type=int, help="MoE experts (default 8)")
    g.add_argument("--top-k", dest="top_k", type=int, help="MoE experts per token (default 2)")
    g.add_argument("--expert-ffn", dest="expert_ffn_hidden", type=int, help="MoE expert MLP width (default 64)")


def cmd_generate(args: argparse.Namespace) -> int:
    from taxbreak.capture.profile import capture_generation
    from taxbreak.capture.sweep import model_label

    out = args.out or f"{model_label(args.model)}_capture.json.gz"
    path = capture_generation(
        out, model=args.model, batch_size=args.batch_size, prompt_len=args.prompt_len,
        output_tokens=args.tokens, dtype=args.dtype, device=args.device, warmup_runs=args.warmup,
        with_stack=args.with_stack, nvtx=args.nvtx, model_config=_model_config(args),
        host_delay_ns=round(args.host_delay_us * 1000),
    )
    print(f"wrote {path} (+ {path.name}.meta.json)")
    return 0


def cmd_null_kernel(args: argparse.Namespace) -> int:
    from taxbreak.capture.null_kernel import capture_null_kernel

    path = capture_null_kernel(args.out, out_dir=args.out_dir, warmup=args.warmup, measured=args.measured)
    print(f"wrote {path} (+ {path.name}.meta.json)")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from taxbreak.capture.sweep import run_sweep

    paths = run_sweep(
        args.out, model=args.model, batch_sizes=args.batch_sizes, seq_lens=args.seq_lens, phases=args.phases,
        tokens=args.tokens, name=args.name, dtype=args.dtype, device=args.device, warmup_runs=args.warmup,
        with_stack=args.with_stack, nvtx=args.nvtx, model_config=_model_config(args),
    )
    print(f"wrote {len(paths)} trace(s) under {args.out}")
    return 0


def cmd_synthetic(args: argparse.Namespace) -> int:
    from taxbreak.capture.synthetic import Dist, SyntheticConfig, generate_synthetic, total_kernels

    dists = {}
    for key in ("python_gap", "dispatch", "library", "launch_api", "launch_latency"):
        text = getattr(args, key)
        if text:
            try:
                dists[key] = Dist.parse(text)
            except ValueError as exc:
                raise CaptureError(str(exc)) from None
    cfg = SyntheticConfig(
        model_kind=args.model, n_layers=args.layers, batch_size=args.batch_size, prompt_len=args.prompt_len,
        output_tokens=args.tokens, n_experts=args.experts, top_k=args.top_k, active_experts=args.active_experts,
        gpu_name=args.gpu_name, cuda_graphs=args.cuda_graphs, seed=args.seed, host_speed=args.host_speed, **dists,
    )
    if args.null_kernel:
        from taxbreak.capture.synthetic import write_null_kernel

        safe = "".join(c if c.isalnum() else "-" for c in args.gpu_name).strip("-")
        path = write_null_kernel(Path(args.out) / f"synthetic_null_kernel_{safe}.json.gz", gpu_name=args.gpu_name,
                                 launch_latency=dists.get("launch_latency"), seed=args.seed)
        print(f"wrote {path} (+ {path.name}.meta.json)  [synthetic]")
        return 0
    formats = tuple(_strs(args.formats))
    print(f"SYNTHETIC workload ({total_kernels(cfg):,} kernels): {cfg.label()}", file=sys.stderr)
    for path in generate_synthetic(args.out, cfg, formats, gzip_json=not args.no_gzip):
        print(f"wrote {path} (+ {path.name}.meta.json)  [synthetic]")
    return 0


def _range(text: str) -> tuple[int, int]:
    try:
        lo, hi = (int(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LO:HI (two integers), got {text!r}") from None
    if lo < 1 or hi < lo:
        raise argparse.ArgumentTypeError(f"expected 1 <= LO <= HI, got {text!r}")
    return lo, hi


def cmd_serve(args: argparse.Namespace) -> int:
    from taxbreak.capture.serving import capture_serving

    out = args.out or f"serving_{args.model}_{args.policy}.json.gz"
    path = capture_serving(
        out, model=args.model, n_requests=args.requests, prompt_len_range=args.prompt_lens,
        output_len_range=args.output_lens, tenants=tuple(_strs(args.tenants)), arrivals_per_step=args.arrivals,
        max_batch_requests=args.max_batch_requests, max_batch_tokens=args.max_batch_tokens, policy=args.policy,
        dtype=args.dtype, device=args.device, model_config=_model_config(args), seed=args.seed,
    )
    print(f"wrote {path} (+ {path.name}.meta.json)")
    return 0


def cmd_synthetic_serving(args: argparse.Namespace) -> int:
    from taxbreak.capture.synthetic_serving import ServingConfig, generate_synthetic_serving

    try:
        cfg = ServingConfig(n_requests=args.requests, tenants=tuple(_strs(args.tenants)),
                            prompt_len_range=args.prompt_lens, output_len_range=args.output_lens,
                            arrivals_per_step=args.arrivals, max_batch_requests=args.max_batch_requests,
                            max_batch_tokens=args.max_batch_tokens, policy=args.policy, noise_sigma=args.noise,
                            gpu_name=args.gpu_name, seed=args.seed)
    except ValueError as exc:
        raise CaptureError(str(exc)) from None
    path = generate_synthetic_serving(args.out, cfg, gzip_json=not args.no_gzip)
    print(f"wrote {path} (+ {path.name}.meta.json)  [synthetic]")
    return 0


def _add_serving_args(p: argparse.ArgumentParser, prompt: str, output: str, batch_tokens: int) -> None:
    p.add_argument("--requests", type=int, default=16, help="requests served (default 16)")
    p.add_argument("--prompt-lens", type=_range, default=_range(prompt),
                   help=f"prompt lengths LO:HI, drawn log-uniform (default {prompt})")
    p.add_argument("--output-lens", type=_range, default=_range(output),
                   help=f"output lengths LO:HI including the first token, log-uniform (default {output})")
    p.add_argument("--tenants", default="alpha,beta", help="tenants, comma-separated, drawn per request")
    p.add_argument("--arrivals", type=float, default=1.0, help="mean new requests per step (default 1.0)")
    p.add_argument("--max-batch-requests", type=int, default=8, help="requests per step at most (default 8)")
    p.add_argument("--max-batch-tokens", type=int, default=batch_tokens,
                   help=f"tokens per step at most; longer prompts are chunked (default {batch_tokens})")
    p.add_argument("--policy", default="chunked", choices=("separate", "chunked"),
                   help="chunked: decode plus prompt chunks in one step (vLLM-like, default); separate: prefill "
                   "and decode steps alternate (SGLang-like)")
    p.add_argument("--seed", type=int, default=0, help="random seed (requests, prompts)")


def _run(func):  # type: ignore[no-untyped-def]
    def wrapped(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except CaptureError as exc:
            print(f"taxbreak capture: {exc}", file=sys.stderr)
            return 2

    return wrapped


def add_capture_parser(sub: argparse._SubParsersAction) -> None:
    cap = sub.add_parser(
        "capture",
        help="capture traces: profiled generation, the null-kernel floor, sweeps, synthetic workloads",
        description="Capture tools (need torch: pip install 'taxbreak[capture]'), except `synthetic`. Every trace "
        "gets a sidecar <trace>.meta.json (also embedded in the Kineto JSON under \"taxbreak\") with the model, "
        "batch size, token counts and the phase of each step.",
    )
    csub = cap.add_subparsers(dest="capture_command", required=True, metavar="WHAT")

    p = csub.add_parser("generate", help="profile greedy generation of a model (prefill + decode steps marked)",
                        description="Profile one greedy generate() with torch.profiler after warm-up runs; the "
                        "prefill forward is marked record_function('prefill') and each decode step "
                        "record_function('decode_step#i').")
    _add_model_args(p)
    p.add_argument("--batch-size", type=int, default=1, help="sequences per batch (default 1)")
    p.add_argument("--prompt-len", type=int, default=16, help="prompt tokens per sequence (default 16)")
    p.add_argument("--tokens", type=int, default=4, help="output tokens m, including the prefill's (default 4)")
    p.add_argument("--out", help="trace file (.json or .json.gz; default <model>_capture.json.gz)")
    p.add_argument("--host-delay-us", type=float, default=0.0,
                   help="busy-wait this long before every aten op (a slower host; the what-if replay's check)")
    p.set_defaults(func=_run(cmd_generate))

    p = csub.add_parser("null-kernel", help="measure the null-kernel launch floor T_sys on this GPU",
                        description="METHOD.md section 4: 20 warm-up and 50 measured launches of an empty "
                        "<<<1,1>>> kernel (torch.cuda._sleep(0)), each followed by torch.cuda.synchronize(). Needs "
                        "a CUDA GPU: exits with status 2 without one.")
    p.add_argument("--out", help="trace file (default null_kernel_<gpu>_<host>.json.gz in --out-dir)")
    p.add_argument("--out-dir", default=".", help="folder for the default file name (default .)")
    p.add_argument("--warmup", type=int, default=20, help="warm-up launches (default 20)")
    p.add_argument("--measured", type=int, default=50, help="measured launches (default 50)")
    p.set_defaults(func=_run(cmd_null_kernel))

    p = csub.add_parser("sweep", help="one trace per batch size x sequence length x phase",
                        description="Capture <model>_bs<B>_sl<S>_<phase>.json.gz for every point: prefill points "
                        "generate 1 token, decode points --tokens tokens. One progress line per point.")
    _add_model_args(p)
    p.add_argument("--batch-sizes", type=_ints, required=True, help="comma-separated, e.g. 1,4,16")
    p.add_argument("--seq-lens", type=_ints, required=True, help="prompt lengths, comma-separated")
    p.add_argument("--phases", type=_strs, default=["prefill", "decode"], help="prefill,decode (default both)")
    p.add_argument("--tokens", type=int, default=4, help="output tokens of a decode point (default 4)")
    p.add_argument("--name", help="sweep name recorded in every sidecar (default <model>_sweep)")
    p.add_argument("--out", required=True, help="output folder")
    p.set_defaults(func=_run(cmd_sweep))

    p = csub.add_parser("synthetic", help="write a SYNTHETIC GPU decode workload (Kineto JSON and/or Nsight SQLite)",
                        description="Simulate HF-eager greedy decoding of a dense or MoE decoder on a GPU and write "
                        "it as Kineto JSON and/or an Nsight Systems SQLite export. The files are named synthetic_* "
                        "and their metadata says synthetic: true. Distributions: fixed:NS, uniform:LO:HI, "
                        "lognormal:MEDIAN_NS:SIGMA. No torch needed.")
    p.add_argument("--model", default="dense", choices=("dense", "moe"), help="architecture (default dense)")
    p.add_argument("--layers", type=int, default=16, help="decoder layers (default 16)")
    p.add_argument("--batch-size", type=int, default=1, help="batch size (default 1)")
    p.add_argument("--prompt-len", type=int, default=128, help="prompt length (default 128)")
    p.add_argument("--tokens", type=int, default=8, help="output tokens m (default 8)")
    p.add_argument("--experts", type=int, default=8, help="MoE experts (default 8)")
    p.add_argument("--top-k", type=int, default=2, help="MoE experts per token (default 2)")
    p.add_argument("--active-experts", type=int, help="experts hit per decode step (default min(experts, top_k*bs))")
    p.add_argument("--gpu-name", default="NVIDIA H100 80GB HBM3", help="GPU name written into the trace")
    p.add_argument("--cuda-graphs", action="store_true", help="replay decode steps with one cudaGraphLaunch each")
    p.add_argument("--host-speed", type=float, default=1.0,
                   help="every host duration / S with the same random draws (the what-if replay's ground truth)")
    p.add_argument("--seed", type=int, default=0, help="random seed (same seed, same bytes)")
    p.add_argument("--formats", default="kineto", help="kineto,sqlite (default kineto)")
    p.add_argument("--no-gzip", action="store_true", help="write .json instead of .json.gz")
    p.add_argument("--null-kernel", action="store_true",
                   help="write a synthetic null-kernel floor trace instead (20 + 50 spin_kernel launches, each "
                   "synced; --launch-latency sets the floor, default lognormal:4600:0.05)")
    for key, default in (("python-gap", "lognormal:2500:0.3"), ("dispatch", "lognormal:5500:0.25"),
                         ("library", "lognormal:4000:0.3"), ("launch-api", "lognormal:3200:0.2"),
                         ("launch-latency", "lognormal:4600:0.15")):
        p.add_argument(f"--{key}", dest=key.replace("-", "_"), help=f"distribution (default {default})")
    p.add_argument("--out", required=True, help="output folder")
    p.set_defaults(func=_run(cmd_synthetic))

    p = csub.add_parser("serve", help="profile a continuous-batching serving loop of co-batched requests",
                        description="Serve requests of different prompt and output lengths with continuous batching "
                        "over a built-in model (packed tokens per step, attention per request over its own KV cache), "
                        "each step marked record_function('serve_step#N'); the sidecar lists every step's requests "
                        "(request id, tenant, tokens, context) for `taxbreak requests`.")
    _add_model_args(p)
    _add_serving_args(p, "4:64", "2:16", 128)
    p.add_argument("--out", help="trace file (default serving_<model>_<policy>.json.gz)")
    p.set_defaults(func=_run(cmd_serve))

    p = csub.add_parser("synthetic-serving", help="write a SYNTHETIC co-batched serving trace with known per-request "
                        "costs", description="Simulate continuous batching with step latencies made of known "
                        "per-request costs (a two-segment LLMVisor model, docs/method.md) times lognormal noise, and "
                        "write it as Kineto JSON; the sidecar carries each request's true cost per step "
                        "(true_cost_ns), the ground truth of `taxbreak requests`. No torch needed.")
    _add_serving_args(p, "16:2048", "2:96", 2048)
    p.add_argument("--noise", type=float, default=0.02, help="lognormal sigma of step latency (default 0.02)")
    p.add_argument("--gpu-name", default="NVIDIA H100 80GB HBM3", help="GPU name written into the trace")
    p.add_argument("--no-gzip", action="store_true", help="write .json instead of .json.gz")
    p.add_argument("--out", required=True, help="output folder")
    p.set_defaults(func=_run(cmd_synthetic_serving))
