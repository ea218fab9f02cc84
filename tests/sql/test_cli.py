"""`taxbreak analyze` and `taxbreak summary` on the mixed scenario."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from taxbreak.cli import main

from .scenarios import MIXED_ID, build_mixed


def test_analyze_then_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    build_mixed(tmp_path / "lake")
    common = ["--lake", str(tmp_path / "lake"), "--warehouse", str(tmp_path / "wh.duckdb")]
    assert main(["analyze", *common]) == 0
    out = capsys.readouterr().out
    assert "analysed all traces" in out and "int_kernel_links" in out
    assert main(["summary", MIXED_ID[:12], *common]) == 0
    out = capsys.readouterr().out
    # HDBI_wall = 10800 / (10800 + launch 2600 + library 2000 + framework 19100) over the two launching threads
    assert "HDBI 0.152 | HDBI_linked 0.146 | coverage 88.9% (low) | HDBI_wall 0.313" in out
    assert "flags: low_coverage, orchestrate_exceeds_wall" in out
    assert "T_Orchestrate 0.060 ms = ΔFT 0.032 ms + ΔCT 0.001 ms + ΔKT 0.027 ms" in out
    assert "kernels per token 4.5 (decode-only 4.0)" in out
    assert "1 negative samples apart" in out
    assert "T_sys = 4.51 µs is the documented default (default_h100)" in out
    assert "exceeds the 2 launching thread(s)' host wall time 0.026 ms" in out
    assert "window [first framework op, last kernel end]: IL 0.029 ms" in out
    assert main(["summary", "mixed.json", "--json", *common]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["headline"]["t_orchestrate_ns"] == 60260 and data["headline"]["host_wall_ns"] == 25700
    assert data["headline"]["t_sys_is_default"] is True
    assert main(["summary", "nope", *common]) == 2
    assert "no trace matches 'nope': it is in neither the warehouse" in capsys.readouterr().err
    missing = tmp_path / "elsewhere" / "absent.duckdb"  # (a folder without exports/: no snapshot to read)
    assert main(["summary", "nope", "--lake", str(tmp_path / "lake"), "--warehouse", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"{missing} does not exist" in err and "taxbreak analyze" in err


def test_summary_reads_the_snapshot_while_a_writer_holds_the_warehouse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    build_mixed(tmp_path / "lake")
    wh = tmp_path / "wh.duckdb"
    common = ["--lake", str(tmp_path / "lake"), "--warehouse", str(wh)]
    assert main(["analyze", *common]) == 0
    snap = tmp_path / "exports" / "snapshot.duckdb"
    assert snap.stat().st_mtime_ns >= wh.stat().st_mtime_ns  # analyze published it: readers read it, silently
    capsys.readouterr()
    assert main(["summary", "mixed.json", "--json", *common]) == 0
    assert json.loads(capsys.readouterr().out)["headline"]["t_orchestrate_ns"] == 60260
    os.utime(snap, ns=(wh.stat().st_mtime_ns - 10**9,) * 2)  # a snapshot older than the file: the file is read
    capsys.readouterr()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys; c = duckdb.connect(sys.argv[1]); print('ready', flush=True); "
         "sys.stdin.read()", str(wh)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        assert main(["summary", "mixed.json", "--json", *common]) == 0
        captured = capsys.readouterr()
        assert json.loads(captured.out)["headline"]["t_orchestrate_ns"] == 60260
        assert "reading the snapshot" in captured.err
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
