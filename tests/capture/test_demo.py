"""`make demo`'s steps on a temporary TAXBREAK_HOME: a real CPU capture plus two synthetic traces, ingested."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from taxbreak import demo
from taxbreak.cli import main
from taxbreak.config import Paths
from taxbreak.engine import runner

REPO = Path(__file__).resolve().parents[2]
DEMO_TRACE = REPO / "tests/data/public/tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"  # make demo's


def test_demo_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for var in ("TAXBREAK_LAKE", "TAXBREAK_WAREHOUSE", "TAXBREAK_INBOX", "TAXBREAK_CACHE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TAXBREAK_HOME", str(tmp_path))
    paths = Paths.from_env()
    files = demo.capture_into_inbox(paths)
    assert [f.name for f in files] == [
        "demo_dense_cpu.json.gz", "synthetic_dense_L4_bs1_sl64_m8.json.gz", "synthetic_moe_L4_bs1_sl64_m8.json.gz",
    ]
    for f in files:
        assert f.parent == tmp_path / "inbox"
        meta = json.loads(Path(str(f) + ".meta.json").read_text())
        assert meta["synthetic"] is f.name.startswith("synthetic_")
        assert meta["output_tokens"] == demo.DEMO_TOKENS and len(meta["steps"]) == demo.DEMO_TOKENS
    results = demo.ingest_inbox(paths)
    assert [r.status for r in results] == ["ingested"] * 3, [r.error for r in results]
    assert demo.print_results(paths, results) == 0
    out = capsys.readouterr().out
    assert out.count("[ingested]") == 3 and out.count("[SYNTHETIC]") == 2
    # the analysis headline of each trace follows (HDBI line present for the synthetic GPU traces)
    assert out.count("HDBI") >= 2 and "synthetic_moe_L4_bs1_sl64_m8.json.gz" in out
    # a second capture keeps the earlier real trace unless asked: the same content, no new trace
    before = (tmp_path / "inbox" / "demo_dense_cpu.json.gz").read_bytes()
    again = demo.capture_into_inbox(paths, recapture=False)
    assert again == files and (tmp_path / "inbox" / "demo_dense_cpu.json.gz").read_bytes() == before
    assert [r.status for r in demo.ingest_inbox(paths)] == ["unchanged"] * 3


def test_demo_copies_a_real_trace_beside_the_others(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """`--trace PATH` (what `make demo` passes with the vendored H100 trace, DEMO_TRACE): the file is copied
    unchanged into the inbox, ingested and summarised as a real trace, not labelled synthetic."""
    monkeypatch.setenv("TAXBREAK_HOME", str(tmp_path / "home"))
    for var in ("TAXBREAK_LAKE", "TAXBREAK_WAREHOUSE", "TAXBREAK_INBOX", "TAXBREAK_CACHE"):
        monkeypatch.delenv(var, raising=False)
    paths = Paths.from_env()
    # one aten::mm launching one kernel: op [1000, 1030] µs, launch [1005, 1015] µs, kernel [1020, 1060] µs
    src = tmp_path / "elsewhere" / "gpu_run.json"
    src.parent.mkdir()
    src.write_text(json.dumps({"schemaVersion": 1, "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1000.0, "dur": 30.0,
         "args": {"External id": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1005.0, "dur": 10.0,
         "args": {"correlation": 7, "External id": 1}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 1020.0, "dur": 40.0,
         "args": {"device": 0, "stream": 7, "correlation": 7, "External id": 1}},
    ]}))
    (copy,) = demo.copy_into_inbox(paths, [src])
    assert copy == paths.inbox / "gpu_run.json" and copy.read_bytes() == src.read_bytes()
    assert demo.copy_into_inbox(paths, [copy]) == [copy]  # a file of the inbox itself stays as it is
    (res,) = demo.ingest_inbox(paths)
    assert (res.status, res.row["event_count"], json.loads(res.row["event_counts_json"])["kernel"]) == (
        "ingested", 3, 1)
    assert demo.print_results(paths, [res]) == 0
    out = capsys.readouterr().out
    assert "[ingested] trace" in out and "gpu_run.json" in out and "[SYNTHETIC]" not in out


def test_demo_names_a_missing_trace(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        demo.main(["--trace", str(tmp_path / "nope.json")])
    assert exc.value.code == 2 and f"--trace {tmp_path / 'nope.json'}: no such file" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_clean_warehouse_removes_what_the_demo_and_report_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """`make clean-warehouse WAREHOUSE_HOME=DIR` after the demo's steps, an analysis and a report in DIR leaves only the
    user's own file in the inbox (issue 29: it missed warehouse/report/, and left the lock, the run files and the
    demo's inbox files)."""
    for var in ("TAXBREAK_LAKE", "TAXBREAK_WAREHOUSE", "TAXBREAK_INBOX", "TAXBREAK_CACHE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TAXBREAK_HOME", str(tmp_path))
    paths = Paths.from_env()
    demo.capture_into_inbox(paths)
    demo.copy_into_inbox(paths, [DEMO_TRACE])
    mine = paths.inbox / "my_run.json"
    mine.write_text('{"traceEvents": []}')
    assert [r.status for r in demo.ingest_inbox(paths)].count("failed") == 0
    runner.run(paths)
    assert main(["report"]) == 0  # into reports/ beside the warehouse, as `make demo` does
    capsys.readouterr()
    written = {p.relative_to(tmp_path).parts[0] for p in tmp_path.iterdir()}
    assert {"lake", "taxbreak.duckdb", "taxbreak.duckdb.lock", "marts", "exports", "reports", "inbox"} <= written
    proc = subprocess.run(["make", "-s", "-C", str(REPO), "clean-warehouse", f"WAREHOUSE_HOME={tmp_path}",
                           f"DEMO_TRACE={DEMO_TRACE.relative_to(REPO)}"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert left == ["inbox", "inbox/my_run.json"]
