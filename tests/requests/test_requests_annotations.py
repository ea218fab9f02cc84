"""Batch composition per serving step from each source: hand-built annotations (vLLM execute_..., SGLang step[...],
the sidecar's steps[].requests[]) with hand-computed sums, then the real public SGLang / vLLM traces."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import duckdb
import pytest
from public_data import available
from requests_support import ev

from taxbreak.engine import analysis
from taxbreak.ingest import Lake, ingest_file
from taxbreak.ingest.sidecar import MetaError, validate_meta

VLLM = "execute_40_context_2(sq36sk50sqsq650sqsk700)_generation_4(sq4sk400sqsq4sqsk400)"
COLS = ("composition_source, phase, batch_requests, prefill_requests, decode_requests, tokens_sum, tokens_sq_sum, "
        "context_sum, step_ts_ns, step_end_ns, kernels, device_active_ns, latency_ns, fit_ready, has_request_detail")


def _meta() -> dict:
    return {"taxbreak_meta_version": 1, "model": "toy", "steps": [{
        "name": "serve_step#1", "phase": "mixed", "tokens": 1,
        "requests": [{"request_id": "x", "tenant": "t1", "phase": "prefill", "tokens": 10, "context_tokens": 0},
                         {"request_id": "y", "phase": "decode", "tokens": 1, "context_tokens": 30,
                          "output_tokens": 1}]}]}


@pytest.fixture()
def wh(lake_builder, tmp_path: Path) -> duckdb.DuckDBPyConnection:
    a, b, c = "a" * 64, "b" * 64, "c" * 64
    lake_builder(a, [
        ev(a, "user_annotation", VLLM, 1000, 49000),
        ev(a, "user_annotation", "step[EXTEND bs=2 toks=36]", 2000, 28000),
        ev(a, "user_annotation", "execute_foo", 60000, 1000),  # not the format: ignored
        ev(a, "runtime_api", "cudaLaunchKernel", 5000, 500, correlation_id=1),
        ev(a, "kernel", "k", 8000, 52000, tid="7", device_id=0, stream_id=7, correlation_id=1),
        # another process's kernel in the same window is not the step's: pid 100 launches kernels of its own
        ev(a, "runtime_api", "cudaLaunchKernel", 6000, 500, pid="200", correlation_id=2),
        ev(a, "kernel", "other", 9000, 1000, pid="200", tid="8", device_id=1, stream_id=8, correlation_id=2),
    ], gpu="NVIDIA H100 80GB HBM3", file_name="a.json")
    lake_builder(b, [
        ev(b, "user_annotation", "step[DECODE bs=3]", 1000, 8000),
        ev(b, "user_annotation", "step[EXTEND bs=2 toks=100]", 10000, 10000),
    ], gpu="NVIDIA H100 80GB HBM3", file_name="b.json")
    lake_builder(c, [ev(c, "user_annotation", "serve_step#1", 0, 5000)], gpu=None, file_name="c.json",
                 metadata={"taxbreak": _meta()})
    d = "d" * 64
    lake = lake_builder(d, [ev(d, "user_annotation", name, 1000 + 10_000 * i, 5000)
                            for i, name in enumerate(VLLM_CONTEXT)], gpu="NVIDIA H100 80GB HBM3", file_name="d.json")
    analysis.materialize(tmp_path / "wh.duckdb", lake.root, tables=["serving_step_requests"])
    con = duckdb.connect(str(tmp_path / "wh.duckdb"), read_only=True)
    yield con
    con.close()


# Current vLLM's execute_context_<C>(<tokens>)_generation_<G>(<tokens>): the count of each phase's requests and their
# scheduled tokens, as one sum (what vLLM writes) or one count per request joined by '_'.
VLLM_CONTEXT = [
    "execute_context_1(888)_generation_0(0)",  # one prompt of 888 tokens: sum p^2 = 888^2
    "execute_context_2(30_6)_generation_3(3)",  # per-request counts 30 and 6; 3 decodes of one token each
    "execute_context_2(36)_generation_0(0)",  # two prompts, one sum: sum p^2 unknown
    "execute_context_0(0)_generation_5(5)",  # 5 decodes, 5 tokens: every p_i = 1, so sum p^2 = 5
    "execute_context_0(0)_generation_2(6)",  # 2 requests, 6 tokens (speculative decoding): sum p^2 unknown
]


def _steps(con: duckdb.DuckDBPyConnection, trace: str) -> list[tuple]:
    sql = f"SELECT {COLS} FROM serving_steps WHERE trace_id = $t ORDER BY step_id"
    return con.execute(sql, {"t": trace}).fetchall()


def test_vllm_annotation_gives_sums_and_the_shorter_overlapping_range_gives_the_time(wh) -> None:
    # 2 context + 4 generation requests; tokens 36 + 4; squares 650 + 4; cached context (50 - 36) + (400 - 4) = 410.
    # The SGLang range inside it is shorter: the step runs [2000, 30000); its kernel was launched at 5000 and ends at
    # 60000, so the latency is 60000 - 2000.
    assert _steps(wh, "a" * 64) == [("vllm_execute", "mixed", 6, 2, 4, 40, 654, 410, 2000, 30000, 1, 52000, 58000,
                                     True, False)]


def test_sglang_annotations_give_batch_and_tokens_only(wh) -> None:
    assert _steps(wh, "b" * 64) == [
        ("sglang_step", "decode", 3, 0, 3, 3, 3, None, 1000, 9000, 0, 0, 8000, False, False),  # p_i = 1: sum p^2 = 3
        ("sglang_step", "prefill", 2, 2, 0, 100, None, None, 10000, 20000, 0, 0, 10000, False, False),
    ]


def test_sidecar_requests_give_every_request(wh) -> None:
    assert _steps(wh, "c" * 64) == [("sidecar", "mixed", 2, 1, 1, 11, 101, 30, 0, 5000, 0, 0, 5000, True, True)]
    rows = wh.execute("SELECT request_id, tenant, request_phase, tokens, context_tokens, output_tokens FROM "
                      "serving_step_requests ORDER BY request_id").fetchall()
    assert rows == [("x", "t1", "prefill", 10, 0, None), ("y", "(none)", "decode", 1, 30, 1)]
    assert wh.execute("SELECT model_name, gpu_name FROM serving_steps WHERE trace_id = $t",
                      {"t": "c" * 64}).fetchone() == ("toy", "unknown")


def test_current_vllm_execute_context_gives_requests_and_tokens_per_phase(wh) -> None:
    rows = wh.execute("SELECT composition_source, phase, prefill_requests, decode_requests, prefill_tokens_sum, "
                      "decode_tokens_sum, prefill_tokens_sq_sum, decode_tokens_sq_sum, context_sum, fit_ready, "
                      "unfit_reason FROM serving_steps WHERE trace_id = $t ORDER BY step_id",
                      {"t": "d" * 64}).fetchall()
    no_ctx = "no attended context (sum c): the annotation does not give the requests' cached tokens"
    no_sq = "no squared token counts (sum p^2): the annotation gives a phase's token sum, not each request's"
    assert [r[:8] for r in rows] == [
        ("vllm_execute_context", "prefill", 1, 0, 888, 0, 888 * 888, 0),
        ("vllm_execute_context", "mixed", 2, 3, 36, 3, 30 * 30 + 6 * 6, 3),
        ("vllm_execute_context", "prefill", 2, 0, 36, 0, None, 0),
        ("vllm_execute_context", "decode", 0, 5, 0, 5, 0, 5),
        ("vllm_execute_context", "decode", 0, 2, 0, 6, 0, None),
    ]
    assert [r[8:] for r in rows] == [(None, False, no_ctx), (None, False, no_ctx), (None, False, no_sq),
                                     (None, False, no_ctx), (None, False, no_sq)]


def test_steps_without_attribution_say_why_per_step_kind(wh) -> None:
    from taxbreak.features.requests import format_requests, trace_requests

    d = trace_requests(wh, "d" * 16)
    got = [(u["phase"], u["composition_source"], u["reason"][:24], u["steps"]) for u in d["unattributed"]]
    assert got == [("decode", "vllm_execute_context", "no attended context (sum", 1),
                   ("decode", "vllm_execute_context", "no squared token counts ", 1),
                   ("mixed", "vllm_execute_context", "no attended context (sum", 1),
                   ("prefill", "vllm_execute_context", "no attended context (sum", 1),
                   ("prefill", "vllm_execute_context", "no squared token counts ", 1)]
    text = format_requests(d)
    assert "steps without attribution, and why:" in text
    assert "    mixed    vllm_execute_context       1 steps: no attended context (sum c)" in text
    from taxbreak.read import report  # the report's section lists them too, before any fit

    html = report.requests_section(report.request_data(wh, "d" * 64))
    assert "Serving steps without attribution, and why" in html and "no squared token counts" in html
    # the fit-ready vLLM step of trace a: no fit yet, and the message says what to run
    a = trace_requests(wh, "a" * 16)["unattributed"]
    assert a == [{"phase": "mixed", "composition_source": "vllm_execute",
                  "reason": "not fitted yet: run `taxbreak requests --refit`", "steps": 1}]


@pytest.mark.parametrize(("bad", "message"), [
    ({"request_id": "x", "phase": "prefill", "tokens": 1, "context_tokens": 0}, "appears twice"),
    ({"request_id": "z", "phase": "verify", "tokens": 1, "context_tokens": 0}, "phase must be one of"),
    ({"request_id": "z", "phase": "decode", "tokens": -1, "context_tokens": 0}, "tokens must be a non-negative"),
    ({"phase": "decode", "tokens": 1, "context_tokens": 0}, "request_id"),
])
def test_bad_requests_are_refused_naming_the_problem(bad: dict, message: str) -> None:
    meta = _meta()
    meta["steps"][0]["requests"].append(bad)
    with pytest.raises(MetaError, match=message) as exc:
        validate_meta(meta, "x.meta.json")
    assert "x.meta.json: steps[0].requests[2]" in str(exc.value)


REAL = {
    # file: (source, phase, |B|, prefill, decode, sum p, sum p^2, sum c, step duration ns)
    "tracelens/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz":
        ("vllm_execute", "decode", 32, 0, 32, 32, 32, 32785 - 32, 465_248_054),
    "tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz":
        ("vllm_execute", "prefill", 15, 15, 0, 15360, 15 * 1024 ** 2, 0, 28_915_862),
    "tracelens/inference/vllm_prefilldecode_piecewise/graph_execution.json.gz":
        ("vllm_execute", "mixed", 46, 9, 37, 8155 + 37, 7475785 + 37, (8430 - 8155) + (34489 - 37), 26_353_441),
}


# A trace built here in the form of the SGLang prefill trace (not vendored, 1.2 MB: tests/data/SOURCES.md), so the
# EXTEND (prefill) variant runs on a fresh clone too: one engine process (pid 251) on ROCm, an execute_... annotation
# [100, 700) us after B holding step[EXTEND bs=3 toks=96] [200.250, 500.375) us; prompts of 10, 30 and 56 tokens
# (sum 96, squares 100 + 900 + 3136 = 4136, no cached context: sk = sq). Three launches: hipLaunchKernel at 155 us
# (inside execute_, before the step), hipExtModuleLaunchKernel at 255 us and hipLaunchKernel at 305 us (in the step),
# each with its kernel (3, 40 and 10 us) on device 0.
SGLANG_GENERATED = "generated/sglang_extend.json.gz"
B_US = 4909913690000


def _sglang_extend_trace() -> dict:
    host = {"pid": 251, "tid": 251}
    events = [
        {"ph": "X", "cat": "user_annotation", **host, "ts": B_US + 100, "dur": 600, "args": {"External id": 1},
         "name": "execute_96_context_3(sq96sk96sqsq4136sqsk4136)_generation_0(sq0sk0sqsq0sqsk0)"},
        {"ph": "X", "cat": "user_annotation", **host, "ts": B_US + 200.25, "dur": 300.125,
         "name": "step[EXTEND bs=3 toks=96]", "args": {"External id": 2}},
    ]
    for corr, (op, api, t_us, k_us, dur_us) in enumerate((("aten::arange", "hipLaunchKernel", 155, 170, 3),
                                                         ("aten::mm", "hipExtModuleLaunchKernel", 255, 270, 40),
                                                         ("aten::add", "hipLaunchKernel", 305, 320, 10)), start=1):
        ext = {"External id": 10 + corr}
        events += [
            {"ph": "X", "cat": "cpu_op", "name": op, **host, "ts": B_US + t_us - 5, "dur": 12, "args": ext},
            {"ph": "X", "cat": "cuda_runtime", "name": api, **host, "ts": B_US + t_us, "dur": 5,
             "args": {**ext, "correlation": corr}},
            {"ph": "s", "id": corr, **host, "ts": B_US + t_us, "cat": "ac2g", "name": "ac2g"},
            {"ph": "X", "cat": "kernel", "name": f"kernel_{op[6:]}", "pid": 0, "tid": 2, "ts": B_US + k_us,
             "dur": dur_us, "args": {**ext, "device": 0, "stream": 2, "correlation": corr, "kind": "Dispatch Kernel"}},
            {"ph": "f", "id": corr, "pid": 0, "tid": 2, "ts": B_US + k_us, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        ]
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "AMD Instinct MI300X"}],
            "roctracer_version": 4.1, "traceEvents": events, "displayTimeUnit": "ms"}


# file: (source, phase, |B|, prefill, decode, sum p, sum p^2, sum c, step duration ns, kernels in the step or None)
EXPECTED = {**{rel: (*row, None) for rel, row in REAL.items()},
            SGLANG_GENERATED: ("vllm_execute", "prefill", 3, 3, 0, 96, 4136, 0, 300_125, 2)}


@pytest.mark.parametrize("rel", available(REAL) + [SGLANG_GENERATED])
def test_real_annotations_parse(rel: str, real_trace, tmp_path: Path) -> None:
    """The public AMD-AGI/TraceLens inference traces (MIT): each holds one execute_... annotation (and the SGLang
    ones a step[EXTEND bs=15 toks=15360] / step[DECODE bs=32] range inside it, which gives the step's time); and the
    SGLang prefill form built here, where the step's kernels are known: those launched in the step range (2), not
    the one launched in execute_... before it."""
    if rel == SGLANG_GENERATED:
        path = tmp_path / "in" / "sglang_extend.json.gz"
        path.parent.mkdir()
        path.write_bytes(gzip.compress(json.dumps(_sglang_extend_trace()).encode()))
    else:
        path = real_trace(rel)
    lake = Lake(tmp_path / "lake")
    assert ingest_file(path, lake).status == "ingested"
    analysis.materialize(tmp_path / "wh.duckdb", lake.root, tables=["serving_steps"])
    con = duckdb.connect(str(tmp_path / "wh.duckdb"), read_only=True)
    rows = con.execute("SELECT composition_source, phase, batch_requests, prefill_requests, decode_requests, "
                       "tokens_sum, tokens_sq_sum, context_sum, step_end_ns - step_ts_ns, fit_ready, kernels > 0, "
                       "kernels, device_active_ns FROM serving_steps").fetchall()
    con.close()
    *want, kernels = EXPECTED[rel]
    assert [r[:11] for r in rows] == [(*want, True, True)]
    if kernels is not None:  # 40 + 10 us of device time
        assert [r[11:] for r in rows] == [(kernels, 50_000)]


def test_trace_without_fit_says_what_to_do(wh) -> None:
    from taxbreak.features.requests import format_requests, trace_requests

    d = trace_requests(wh, "a" * 16)
    assert d["fitted"] is False
    assert [(s["composition_source"], s["phase"], s["steps"]) for s in d["steps"]] == [("vllm_execute", "mixed", 1)]
    text = format_requests(d)
    assert "per-step sums only (no request ids)" in text and "run `taxbreak requests --refit`" in text
