"""Real torch.profiler captures of the built-in tiny decoders on the CPU (small: the whole file runs in seconds)."""

from __future__ import annotations

import gzip
import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest
import torch  # pinned in requirements-dev.lock: a missing torch is a failure, not a skip

from taxbreak.capture.profile import CaptureError, capture_generation, sidecar_path
from taxbreak.capture.sweep import run_sweep
from taxbreak.ingest import Lake, ingest_file

TINY = {"n_layers": 2, "hidden": 32, "n_heads": 2, "ffn_hidden": 64, "vocab": 64, "n_experts": 4, "top_k": 2,
        "expert_ffn_hidden": 32}
BATCH = 2
TOKENS = 3  # 1 from the prefill + 2 decode steps


def _load(path: Path) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("captures")
    return {
        kind: capture_generation(out / f"{kind}.json.gz", model=kind, batch_size=BATCH, prompt_len=8,
                                 output_tokens=TOKENS, warmup_runs=0, model_config=TINY)
        for kind in ("dense", "moe")
    }


def _annotations(doc: dict) -> Counter:
    return Counter(e["name"] for e in doc["traceEvents"] if e.get("cat") == "user_annotation")


@pytest.mark.parametrize("kind", ["dense", "moe"])
def test_one_prefill_and_two_decode_step_markers(captures: dict[str, Path], kind: str) -> None:
    ann = _annotations(_load(captures[kind]))
    step_marks = {k: v for k, v in ann.items() if k == "prefill" or k.startswith("decode_step#")}
    assert step_marks == {"prefill": 1, "decode_step#1": 1, "decode_step#2": 1}
    # Only the measured cycle is in the trace: the profiler's warm-up cycle was discarded.
    assert ann["ProfilerStep#1"] == 1 and not any(k.startswith("ProfilerStep#0") for k in ann)


@pytest.mark.parametrize("kind", ["dense", "moe"])
def test_sidecar_equals_embedded_metadata(captures: dict[str, Path], kind: str) -> None:
    doc = _load(captures[kind])
    side = json.loads(sidecar_path(captures[kind]).read_text())
    assert side == doc["taxbreak"]
    assert side["taxbreak_meta_version"] == 1
    assert side["kind"] == "generation" and side["model_kind"] == kind and side["synthetic"] is False
    assert (side["batch_size"], side["prompt_len"], side["output_tokens"]) == (BATCH, 8, TOKENS)
    assert side["steps"] == [
        {"name": "prefill", "phase": "prefill", "tokens": 1},
        {"name": "decode_step#1", "phase": "decode", "tokens": 1},
        {"name": "decode_step#2", "phase": "decode", "tokens": 1},
    ]
    assert side["device"] == "cpu" and side["gpu_name"] is None and side["dtype"] == "float32"
    assert side["warmup_runs"] == 1 and side["measured_runs"] == 1 and side["sweep"] is None
    assert side["torch_version"] == torch.__version__ and side["host_name"] and side["cpu_name"]


def _aten_ops_per_decode_step(doc: dict) -> list[int]:
    ev = doc["traceEvents"]
    steps = [e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("decode_step#")]
    counts = []
    for s in steps:
        lo, hi = s["ts"], s["ts"] + s["dur"]
        counts.append(sum(
            1 for e in ev
            if e.get("cat") == "cpu_op" and e["name"].startswith("aten::") and e["tid"] == s["tid"]
            and lo <= e["ts"] <= hi
        ))
    return counts


def test_moe_has_more_aten_ops_per_decode_step_than_dense(captures: dict[str, Path]) -> None:
    dense = _aten_ops_per_decode_step(_load(captures["dense"]))
    moe = _aten_ops_per_decode_step(_load(captures["moe"]))
    assert len(dense) == len(moe) == 2 and min(dense) > 0
    # Same layers and hidden size: the router and the per-expert loop add ops to every layer.
    assert min(moe) > max(dense)


def test_capture_ingests_into_the_lake(captures: dict[str, Path], tmp_path: Path) -> None:
    res = ingest_file(captures["dense"], Lake(tmp_path / "lake"))
    assert res.status == "ingested", res.error
    counts = json.loads(res.row["event_counts_json"])
    ann = _annotations(_load(captures["dense"]))
    assert counts["user_annotation"] == sum(ann.values())  # ProfilerStep#1, prefill, 2 decode steps
    assert counts.get("kernel", 0) == 0  # a CPU capture has no device events


def test_sweep_names_and_sweep_blocks(tmp_path: Path) -> None:
    lines: list[str] = []
    paths = run_sweep(tmp_path, model="dense", batch_sizes=[1, 2], seq_lens=[4], phases=["prefill", "decode"],
                      tokens=3, log=lines.append, warmup_runs=0, model_config=TINY)
    names = [p.name for p in paths]
    assert names == ["dense_bs1_sl4_prefill.json.gz", "dense_bs1_sl4_decode.json.gz",
                     "dense_bs2_sl4_prefill.json.gz", "dense_bs2_sl4_decode.json.gz"]
    assert len(lines) == 4 and lines[0].startswith("[1/4] ")
    for p in paths:
        meta = json.loads(sidecar_path(p).read_text())
        b, phase = int(p.name.split("_bs")[1].split("_")[0]), p.name.split("_")[-1].split(".")[0]
        assert meta["sweep"] == {"name": "dense_sweep", "batch_size": b, "seq_len": 4, "phase": phase}
        assert meta["batch_size"] == b and meta["prompt_len"] == 4
        assert meta["output_tokens"] == (1 if phase == "prefill" else 3)
        assert len(meta["steps"]) == meta["output_tokens"]
        ann = _annotations(_load(p))
        assert ann["prefill"] == 1 and sum(v for k, v in ann.items() if k.startswith("decode_step#")) == (
            0 if phase == "prefill" else 2)


def test_null_kernel_refuses_without_cuda(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the refusal path is for CPU-only machines")
    from taxbreak.cli import main

    assert main(["capture", "null-kernel", "--out-dir", str(tmp_path)]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_local_hf_model_needs_transformers_or_a_folder(tmp_path: Path) -> None:
    with pytest.raises(CaptureError) as err:
        capture_generation(tmp_path / "x.json.gz", model=str(tmp_path / "no-such-model"), output_tokens=2)
    if importlib.util.find_spec("transformers") is None:
        assert "transformers is not installed" in str(err.value)
    else:
        assert "not a local model folder" in str(err.value)
    assert not (tmp_path / "x.json.gz").exists()
