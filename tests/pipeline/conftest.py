"""Fixtures for the pipeline tests: a temporary bucket/lake/warehouse, a Dagster instance with telemetry and
compute-log capture off, and small Kineto and Nsight traces written by code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from taxbreak.capture.synthetic import SyntheticConfig, write_nsys_sqlite
from taxbreak.ingest.sidecar import sidecar_path

# A SYNTHETIC Nsight Systems SQLite export written by the project's own writer (taxbreak.capture.synthetic, the
# real export schema): the prefill step of a 1-layer dense decoder with a 4-token prompt, one output token.
NSIGHT = SyntheticConfig(model_kind="dense", n_layers=1, batch_size=1, prompt_len=4, output_tokens=1, seed=0)
# By hand, from synthetic.py's docstring: kernels = 26 per layer + 9 per step = 35; each kernel has one launch call
# (CUPTI_ACTIVITY_KIND_RUNTIME) and one NVTX op range; the argmax token's device-to-host copy adds a cudaMemcpyAsync,
# a cudaStreamSynchronize and a MEMCPY row; the step adds two NVTX ranges ('ProfilerStep#1', 'prefill').
NSIGHT_KERNELS = 26 * 1 + 9
NSIGHT_EVENTS = NSIGHT_KERNELS + (NSIGHT_KERNELS + 2) + 1 + (NSIGHT_KERNELS + 2)  # = 110


def write_nsight(path: Path) -> Path:
    """The NSIGHT export at ``path`` (byte-identical every time: the writer is seeded), without its sidecar: the
    export's own META_DATA_EXPORT rows say it is synthetic."""
    write_nsys_sqlite(NSIGHT, path)
    sidecar_path(path).unlink()
    return path


def kineto_trace(n_kernels: int, *, base_us: float = 1000.0) -> dict:
    """A tiny Kineto trace: one aten::mm op per kernel, each launching one kernel on stream 7.

    Events: n framework ops + n cudaLaunchKernel + n kernels = 3n timed events, plus 1 metadata event.
    """
    events: list[dict] = [{"ph": "M", "name": "process_name", "pid": 11, "tid": 0, "args": {"name": "python"}}]
    for i in range(n_kernels):
        t = base_us + 100.0 * i
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 11, "tid": 22, "ts": t, "dur": 30.0,
                       "args": {"External id": i + 1}})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 11, "tid": 22,
                       "ts": t + 5.0, "dur": 10.0, "args": {"correlation": 100 + i, "External id": i + 1}})
        events.append({"ph": "X", "cat": "kernel", "name": f"gemm_{i}", "pid": 0, "tid": 7, "ts": t + 20.0,
                       "dur": 40.0, "args": {"device": 0, "stream": 7, "correlation": 100 + i,
                                             "External id": i + 1}})
    return {"schemaVersion": 1, "traceEvents": events}


def write_kineto(path: Path, n_kernels: int, **kw: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(kineto_trace(n_kernels, **kw)))
    return path


@pytest.fixture
def dagster_home(tmp_path: Path) -> Path:
    home = tmp_path / "dagster_home"
    home.mkdir()
    # no compute-log capture: it starts a `tail -F` and a watcher process per step, and no test reads those logs
    # (deploy/'s instances keep theirs: tests/pipeline/test_deploy.py)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\ncompute_logs:\n"
                                       "  module: dagster._core.storage.noop_compute_log_manager\n"
                                       "  class: NoOpComputeLogManager\n")
    return home


@pytest.fixture
def env(tmp_path: Path, dagster_home: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Point every resource at a temporary tree; files settle at once."""
    paths = {
        "inbox": tmp_path / "inbox", "lake": tmp_path / "lake", "warehouse": tmp_path / "wh" / "taxbreak.duckdb",
        "cache": tmp_path / "cache",
    }
    paths["inbox"].mkdir()
    monkeypatch.setenv("TAXBREAK_INBOX", str(paths["inbox"]))
    monkeypatch.setenv("TAXBREAK_LAKE", str(paths["lake"]))
    monkeypatch.setenv("TAXBREAK_WAREHOUSE", str(paths["warehouse"]))
    monkeypatch.setenv("TAXBREAK_CACHE", str(paths["cache"]))
    monkeypatch.setenv("TAXBREAK_SETTLE_S", "0")
    monkeypatch.delenv("TAXBREAK_BUCKET", raising=False)
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    return paths


@pytest.fixture
def instance(env: dict[str, Path]):  # noqa: ANN201 - a DagsterInstance on the temporary $DAGSTER_HOME
    import dagster as dg

    with dg.DagsterInstance.get() as inst:
        yield inst
