""".nsys-rep conversion and `taxbreak nsys-check` through a stand-in `nsys` script: the error paths and outputs a
real nsys cannot be made to produce here.  The real nsys 2022.4 runs in test_nsys_real.py."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from nsys_fixtures import build_tiny_export
from public_data import available

from taxbreak.cli import main
from taxbreak.ingest import Lake, ingest_file
from taxbreak.ingest.base import IngestError
from taxbreak.ingest.nsys_rep import convert_report, report_version

HEADER = b"NVIDIA Tegra Profiler Report 2025@1@1@110-xyz\x00"


def _fake_nsys(bindir: Path, body: str) -> Path:
    bindir.mkdir(parents=True, exist_ok=True)
    script = bindir / "nsys"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


@pytest.fixture
def report(tmp_path: Path) -> Path:
    p = tmp_path / "in" / "r.nsys-rep"
    p.parent.mkdir()
    p.write_bytes(HEADER + b"binary...")
    return p


@pytest.fixture
def no_nsys(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("TAXBREAK_NSYS", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "emptybin"))
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "venv"))  # nor the one setup_nsys.sh unpacks into .venv/nsys


# Public reports and the nsys version each was written by; the nvFuser report is not vendored (tests/data/SOURCES.md),
# so a report built here with its header line (its first 58 bytes) stands beside it and runs on a fresh clone.
REPORTS = {"llm.c/report1.nsys-rep": "2023.4.4.54", "nvfuser/ee4fcf30/report1.nsys-rep": "2025.1.1.110"}
NVFUSER_HEADER = b"NVIDIA Tegra Profiler Report 2025@1@1@110-251135451612v0.\n"
GENERATED_REPORT = "generated/nvfuser_header.nsys-rep"


@pytest.mark.parametrize("rel", available(REPORTS) + [GENERATED_REPORT])
def test_public_reports_need_nsys(rel: str, no_nsys: None, tmp_path: Path,
                                  public_trace: Callable[[str], Path]) -> None:
    if rel == GENERATED_REPORT:
        path, ver = tmp_path / "in" / "report1.nsys-rep", "2025.1.1.110"
        path.parent.mkdir()
        path.write_bytes(NVFUSER_HEADER + b"\x0b\x4c\x6f\x63\x61\x6c (CLI)" + bytes(range(256)))  # then protobuf
    else:
        path, ver = public_trace(rel), REPORTS[rel]
    res = ingest_file(path, Lake(tmp_path / "lake"), cache_dir=tmp_path / "cache")
    assert res.status == "failed"
    want = f"written by nsys {ver}): no nsys found; install the Nsight Systems CLI (nsys) version {ver}"
    assert want in res.error
    assert "nsys export --type sqlite" in res.error and "TAXBREAK_NSYS" in res.error
    assert res.row["source_format"] == "nsys-rep"


def test_report_newer_than_installed_nsys(report: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert report_version(report) == (2025, 1, 1, 110)
    nsys = _fake_nsys(tmp_path / "bin", 'echo "NVIDIA Nsight Systems version 2022.4.2.1-df9881f"\n')
    monkeypatch.setenv("TAXBREAK_NSYS", str(nsys))
    newer = r"written by nsys 2025\.1\.1\.110, newer than the installed nsys 2022\.4\.2\.1"
    with pytest.raises(IngestError, match=newer):
        convert_report(report, tmp_path / "cache")


@pytest.mark.parametrize("failure", ["exit", "timeout"])
def test_failed_export_leaves_nothing(report: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      failure: str) -> None:
    tail = "exit 3\n" if failure == "exit" else "sleep 5\n"
    body = ('if [ "$1" = "--version" ]; then echo "NVIDIA Nsight Systems version 2026.2.1.210-1"; exit 0; fi\n'
            'for a; do out="$a"; prev="$a"; done\n'
            # the output path is the argument after --output
            'while [ $# -gt 0 ]; do if [ "$1" = "--output" ]; then o="$2"; fi; shift; done\n'
            'printf "SQLite format 3 partial" > "$o"\n' + tail)
    monkeypatch.setenv("TAXBREAK_NSYS", str(_fake_nsys(tmp_path / "bin", body)))
    cache = tmp_path / "cache"
    with pytest.raises(IngestError, match="nsys export failed" if failure == "exit" else "did not finish"):
        convert_report(report, cache, timeout_s=30 if failure == "exit" else 1)
    assert [p for p in cache.rglob("*") if p.is_file()] == []


def test_export_is_cached_and_reused(report: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fixture = build_tiny_export(tmp_path / "tiny.sqlite")
    calls = tmp_path / "calls"
    body = (f'echo call >> "{calls}"\n'
            'if [ "$1" = "--version" ]; then echo "NVIDIA Nsight Systems version 2026.2.1.210-1"; exit 0; fi\n'
            'while [ $# -gt 0 ]; do if [ "$1" = "--output" ]; then o="$2"; fi; shift; done\n'
            f'cp "{fixture}" "$o"\n')
    monkeypatch.setenv("TAXBREAK_NSYS", str(_fake_nsys(tmp_path / "bin", body)))
    lake, cache = Lake(tmp_path / "lake"), tmp_path / "cache"
    res = ingest_file(report, lake, cache_dir=cache)
    assert res.status == "ingested", res.error
    assert res.row["source_format"] == "nsys-rep" and res.row["event_count"] == 12
    assert len(calls.read_text().splitlines()) == 2  # --version + export
    res2 = ingest_file(report, lake, cache_dir=cache, force=True)
    assert res2.status == "ingested"
    assert len(calls.read_text().splitlines()) == 2  # the cached export was reused
    assert [p.name for p in (cache / "nsys-export").iterdir()] == [f"{res.trace_id}.sqlite"]


CSV_HEAD = "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n"


@pytest.mark.parametrize(("graph_total", "rc"), [(600, 0), (601, 1)])
def test_nsys_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                    graph_total: int, rc: int) -> None:
    fixture = build_tiny_export(tmp_path / "tiny.sqlite")
    # Hand-computed from the fixture: gemm 1 x 1000 ns; graph_k 3 x 200 ns.
    csv = (CSV_HEAD + '62.5,1000,1,1000.0,1000.0,1000,1000,0.0,"void gemm<float>(float*)"\n'
           f'37.5,{graph_total},3,200.0,200.0,200,200,0.0,"void graph_k(int)"\n')
    (tmp_path / "out.csv").write_text(csv)
    body = ('if [ "$1" = "--version" ]; then echo "NVIDIA Nsight Systems version 2026.2.1.210-1"; exit 0; fi\n'
            'echo "Generating SQLite file..."\n'
            f'cat "{tmp_path / "out.csv"}"\n')
    monkeypatch.setenv("TAXBREAK_NSYS", str(_fake_nsys(tmp_path / "bin", body)))
    assert main(["nsys-check", str(fixture), "--lake", str(tmp_path / "lake")]) == rc
    out = capsys.readouterr()
    if rc == 0:
        assert "OK: 2 kernel names, 4 kernels, 1,600 ns" in out.out
    else:
        assert "MISMATCH: 1 of 2 kernel names differ" in out.err
        assert "void graph_k(int): taxbreak (3, 600) vs nsys (3, 601) (instances, total ns)" in out.err
        assert "gemm" not in out.err


def test_nsys_check_without_nsys(no_nsys: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fixture = build_tiny_export(tmp_path / "tiny.sqlite")
    assert main(["nsys-check", str(fixture), "--lake", str(tmp_path / "lake")]) == 2
    assert "needs the Nsight Systems CLI" in capsys.readouterr().err
    assert os.path.exists(fixture)
