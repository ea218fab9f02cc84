"""`make demo`'s steps on a temporary TAXBREAK_HOME: a real CPU capture plus two synthetic traces, ingested."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from taxbreak import demo
from taxbreak.config import Paths


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
