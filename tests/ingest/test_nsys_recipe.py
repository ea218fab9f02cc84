"""`nsys recipe` as the second cross-check of `taxbreak nsys-check` (issue 11 §6): parsing recipe output generated
here in the documented layout (cuda_gpu_kern_sum: all_stats.parquet indexed by Name; --csv: all_stats.csv), the
subprocess path through a stand-in nsys, what is stored next to ours in the lake, and the real nsys where one is
installed (tests/ingest/setup_nsys.sh: Debian's 2022.4, which has no recipes)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from nsys_fixtures import build_tiny_export

from taxbreak.cli import main
from taxbreak.features.nsys_check import (
    GAPS_RECIPE,
    KERNEL_RECIPE,
    parse_gaps_recipe,
    parse_kernel_recipe,
    recipes_unavailable,
    run_recipes,
)
from taxbreak.ingest import Lake
from taxbreak.ingest.nsys_rep import nsys_version

# The tiny fixture's kernels, by hand: gemm 1 x 1000 ns (3500 -> 4500); graph_k 3 x 200 ns.
GEMM, GRAPH_K = "void gemm<float>(float*)", "void graph_k(int)"
STATS_CSV = ("Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n"
             f'62.5,1000,1,1000.0,1000.0,1000,1000,0.0,"{GEMM}"\n37.5,600,3,200.0,200.0,200,200,0.0,"{GRAPH_K}"\n')


def write_kern_sum(folder: Path, rows: dict[str, tuple[int, int]], *, csv: bool = False) -> Path:
    """A cuda_gpu_kern_sum output folder: files.parquet, rank_stats.parquet and all_stats.parquet (per-kernel
    statistics, index Name, ns), as the recipe's reducer writes them with pandas; with ``csv`` the CSV copies."""
    folder.mkdir(parents=True, exist_ok=True)
    stats = pd.DataFrame([{"Name": n, "Time": 0.0, "Total Time": t, "Instances": c, "Avg": t / c, "Q1": 0,
                           "Med": t / c, "Q3": 0, "Min": 0, "Max": 0, "StdDev": 0.0} for n, (c, t) in rows.items()])
    all_stats = stats.set_index("Name")
    pd.DataFrame({"File": ["report1"]}).rename_axis("Rank").to_parquet(folder / "files.parquet")
    all_stats.assign(Rank=0).to_parquet(folder / "rank_stats.parquet")
    all_stats.to_parquet(folder / "all_stats.parquet")
    if csv:
        all_stats.to_csv(folder / "all_stats.csv")
    return folder


def write_gaps(folder: Path, gaps: list[tuple[int, int]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"File": ["report1"]}).rename_axis("Rank").to_parquet(folder / "files.parquet")
    pd.DataFrame([{"Rank": 0, "PID": 100, "Device ID": 0, "Start": s, "End": e} for s, e in gaps]
                 ).to_parquet(folder / "all_gaps.parquet")
    return folder


def test_kernel_summary_parsed_from_parquet_and_csv(tmp_path: Path) -> None:
    rows = {GEMM: (1, 1000), GRAPH_K: (3, 600)}
    got = parse_kernel_recipe(write_kern_sum(tmp_path / "a", rows))
    assert got.status == "ok" and got.table.to_pylist() == [
        {"name": GEMM, "instances": 1, "total_ns": 1000}, {"name": GRAPH_K, "instances": 3, "total_ns": 600}]
    (tmp_path / "a" / "all_stats.parquet").unlink()
    assert parse_kernel_recipe(write_kern_sum(tmp_path / "b", rows, csv=True)).table.to_pylist() == \
        got.table.to_pylist()
    (tmp_path / "b" / "all_stats.parquet").unlink()
    assert parse_kernel_recipe(tmp_path / "b").table.to_pylist() == got.table.to_pylist()  # the CSV alone


def test_unknown_layout_is_reported_not_guessed(tmp_path: Path) -> None:
    folder = tmp_path / "odd"
    folder.mkdir()
    pd.DataFrame({"Kernel": [GEMM], "Calls": [1]}).to_parquet(folder / "all_stats.parquet")
    got = parse_kernel_recipe(folder)
    assert (got.status, got.table) == ("unparsed", None)
    assert got.reason == "all_stats has no name/instances/total columns (columns: Kernel, Calls)"
    assert parse_kernel_recipe(tmp_path / "missing").reason.startswith("no all_stats.parquet or all_stats.csv")
    assert parse_gaps_recipe(folder).status == "unparsed"


def test_gaps_parsed_with_durations(tmp_path: Path) -> None:
    got = parse_gaps_recipe(write_gaps(tmp_path / "g", [(1_000, 600_001_000), (700_000_000, 1_900_000_000)]))
    assert got.status == "ok"
    assert got.summary == {"gaps": 2, "total_ns": 600_000_000 + 1_200_000_000, "max_ns": 1_200_000_000}
    assert got.table.column("duration_ns").to_pylist() == [600_000_000, 1_200_000_000]


def _fake_nsys(bindir: Path, version: str, export: Path, recipe_dirs: dict[str, Path] | None) -> Path:
    """A stand-in nsys: --version; export copies ``export``; stats prints STATS_CSV; recipe copies the prepared
    folder of that recipe into --output (or answers 'Unknown command: recipe' when ``recipe_dirs`` is None).
    Every call's arguments are appended to bindir/calls."""
    bindir.mkdir(parents=True, exist_ok=True)
    (bindir / "stats.csv").write_text(STATS_CSV)
    recipes = "".join(f'  {name}) cp -r "{src}/." "$o/";;\n' for name, src in (recipe_dirs or {}).items())
    recipe_cmd = ('if [ "$2" = "--help" ]; then echo "cuda_gpu_kern_sum -- CUDA GPU Kernel Summary"; exit 0; fi\n'
                  f'mkdir -p "$o"\ncase "$2" in\n{recipes}  *) echo "no recipe $2" >&2; exit 1;;\nesac\nexit 0\n'
                  if recipe_dirs is not None else 'echo "Unknown command: recipe"; exit 0\n')
    script = bindir / "nsys"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> "{bindir / "calls"}"\n'
        f'if [ "$1" = "--version" ]; then echo "NVIDIA Nsight Systems version {version}"; exit 0; fi\n'
        'o=""; prev=""; for a in "$@"; do if [ "$prev" = "--output" ]; then o="$a"; fi; prev="$a"; done\n'
        f'if [ "$1" = "export" ]; then cp "{export}" "$o"; exit 0; fi\n'
        f'if [ "$1" = "stats" ]; then echo "Generating SQLite file..."; cat "{bindir / "stats.csv"}"; exit 0; fi\n'
        f'if [ "$1" = "recipe" ]; then\n{recipe_cmd}fi\nexit 9\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def _report(tmp_path: Path) -> Path:
    rep = tmp_path / "in" / "run.nsys-rep"
    rep.parent.mkdir(parents=True)
    rep.write_bytes(b"NVIDIA Tegra Profiler Report 2025@1@1@110-xyz\x00binary")
    return rep


@pytest.mark.parametrize("recipe_total", [600, 601])
def test_nsys_check_runs_both_recipes_and_stores_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str], recipe_total: int) -> None:
    export = build_tiny_export(tmp_path / "tiny.sqlite")
    dirs = {KERNEL_RECIPE: write_kern_sum(tmp_path / "kern", {GEMM: (1, 1000), GRAPH_K: (3, recipe_total)}),
            GAPS_RECIPE: write_gaps(tmp_path / "gaps", [(10, 600_000_010)])}
    nsys = _fake_nsys(tmp_path / "bin", "2026.2.1.210-1", export, dirs)
    monkeypatch.setenv("TAXBREAK_NSYS", str(nsys))
    rep = _report(tmp_path)
    lake_root = tmp_path / "lake"
    rc = main(["nsys-check", str(rep), "--lake", str(lake_root), "--gap-ms", "250"])
    out = capsys.readouterr()
    assert rc == (0 if recipe_total == 600 else 1)
    assert "OK: 2 kernel names, 4 kernels, 1,600 ns agree with the kernel summary of nsys stats" in out.out
    if recipe_total == 600:
        assert "nsys recipe cuda_gpu_kern_sum: agrees per kernel name" in out.out
    else:
        assert "nsys recipe cuda_gpu_kern_sum: MISMATCH: 1 kernel names differ (by name)" in out.err
        assert f"{GRAPH_K}: taxbreak (3, 600) vs recipe (3, 601) (instances, total ns)" in out.err
    assert "nsys recipe gpu_gaps: 1 gaps of >= 250 ms, 600,000,000 ns in all (stored, not compared)" in out.out
    calls = (tmp_path / "bin" / "calls").read_text().splitlines()
    (kern_call,) = [c for c in calls if c.startswith(f"recipe {KERNEL_RECIPE} ")]
    assert f"--input {rep.resolve()} --output /" in kern_call and kern_call.endswith("--force-overwrite")
    (gaps_call,) = [c for c in calls if c.startswith(f"recipe {GAPS_RECIPE} ")]
    assert gaps_call.endswith("--force-overwrite --gap 250")
    # stored next to ours: checks/nsys/<trace_id>/
    (folder,) = (lake_root / "checks" / "nsys").iterdir()
    record = json.loads((folder / "check.json").read_text())
    assert record["trace_id"] == folder.name and record["nsys_version"] == "2026.2.1.210"
    assert record["stats"] == {"status": "agree", "differences": []}
    assert record["lake"] == {"kernel_names": 2, "kernels": 4, "total_ns": 1600}
    kern = record["recipes"][KERNEL_RECIPE]
    assert (kern["status"], kern["agreement"]) == ("ok", "agree" if recipe_total == 600 else "mismatch")
    assert record["recipes"][GAPS_RECIPE] == {"status": "ok", "reason": None, "gaps": 1, "total_ns": 600_000_000,
                                              "max_ns": 600_000_000, "gap_threshold_ms": 250}
    assert sorted(p.name for p in folder.iterdir()) == [
        "check.json", "kernel_summary_lake.parquet", "kernel_summary_recipe.parquet", "kernel_summary_stats.parquet",
        "recipe_gpu_gaps.parquet"]
    assert pq.read_table(folder / "kernel_summary_recipe.parquet").to_pylist()[1] == {
        "name": GRAPH_K, "instances": 3, "total_ns": recipe_total}
    assert Lake(lake_root).catalogue().num_rows == 1  # the check files are no trace: the catalogue is unchanged


def test_recipe_with_short_names_is_compared_by_short_name(tmp_path: Path) -> None:
    from taxbreak.features.nsys_check import compare_kernel_recipe

    got = parse_kernel_recipe(write_kern_sum(tmp_path / "k", {"gemm": (1, 1000), "graph_k": (3, 600)}))
    key, diffs = compare_kernel_recipe(got, {GEMM: (1, 1000), GRAPH_K: (3, 600)}, {"gemm": (1, 1000),
                                                                                  "graph_k": (3, 600)})
    assert (key, diffs) == ("short_name", [])


def test_nsys_without_recipes_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    nsys = _fake_nsys(tmp_path / "bin", "2022.4.2.1-df9881f", build_tiny_export(tmp_path / "tiny.sqlite"), None)
    monkeypatch.setenv("TAXBREAK_NSYS", str(nsys))
    assert main(["nsys-check", str(_report(tmp_path)), "--lake", str(tmp_path / "lake")]) == 0
    out = capsys.readouterr().out
    assert ("nsys recipe: not available: nsys 2022.4.2.1 has no `nsys recipe` (it answers 'Unknown command: "
            "recipe'; recipes ship with Nsight Systems 2023.3 and later); the cross-check rests on nsys stats alone"
            ) in out
    (folder,) = (tmp_path / "lake" / "checks" / "nsys").iterdir()
    record = json.loads((folder / "check.json").read_text())
    assert {r["status"] for r in record["recipes"].values()} == {"unavailable"}


def test_recipes_need_the_report_not_a_sqlite_export(tmp_path: Path) -> None:
    nsys = _fake_nsys(tmp_path / "bin", "2026.2.1.210-1", build_tiny_export(tmp_path / "t.sqlite"), {})
    got = run_recipes(str(nsys), (2026, 2, 1, 210), tmp_path / "t.sqlite", tmp_path / "work")
    assert {r.status for r in got.values()} == {"not_run"}
    assert got[KERNEL_RECIPE].reason.startswith("recipes read .nsys-rep reports")


def test_failed_recipe_is_reported_with_nsys_message(tmp_path: Path) -> None:
    nsys = _fake_nsys(tmp_path / "bin", "2026.2.1.210-1", build_tiny_export(tmp_path / "t.sqlite"), {})
    got = run_recipes(str(nsys), (2026, 2, 1, 210), _report(tmp_path), tmp_path / "work")
    assert got[KERNEL_RECIPE].status == "failed"
    assert got[KERNEL_RECIPE].reason == "nsys recipe cuda_gpu_kern_sum failed (exit 1: no recipe cuda_gpu_kern_sum)"


# -- the real nsys ------------------------------------------------------------------------------------------------
def _real_nsys() -> str:
    """The real nsys: $TAXBREAK_NSYS, else the one tests/ingest/setup_nsys.sh installs (skip, saying why)."""
    env = os.environ.get("TAXBREAK_NSYS")
    if env and Path(env).exists():
        return env
    if os.environ.get("TAXBREAK_SKIP_NSYS_SETUP") == "1":
        pytest.skip("no TAXBREAK_NSYS and TAXBREAK_SKIP_NSYS_SETUP=1")
    setup = Path(__file__).resolve().parent / "setup_nsys.sh"
    try:
        proc = subprocess.run(["bash", str(setup)], capture_output=True, text=True, timeout=600, check=False)
    except subprocess.TimeoutExpired:
        pytest.skip("tests/ingest/setup_nsys.sh did not finish within 600 s")
    if proc.returncode != 0:
        pytest.skip(f"nsys could not be set up (setup_nsys.sh exit {proc.returncode})")
    return proc.stdout.strip().splitlines()[-1]


def test_real_nsys_recipe_support(tmp_path: Path) -> None:
    """With Debian's 2022.4 the probe finds no recipes; with a 2023.3+ nsys both recipes run on a real report."""
    nsys = _real_nsys()
    version = nsys_version(nsys)
    reason = recipes_unavailable(nsys, version)
    if version is not None and version[:2] < (2023, 3):
        assert reason is not None and "answers 'Unknown command: recipe'" in reason
        return
    assert reason is None, reason
    report = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "public" / "llm.c" / "report1.nsys-rep"
    if not report.is_file():
        pytest.skip(f"no real report with kernels at {report} to run the recipes on")
    got = run_recipes(nsys, version, report, tmp_path)
    for r in got.values():
        if r.status == "failed" and "No module named" in (r.reason or ""):
            pytest.skip(f"the recipes' Python packages are not installed: {r.reason}")
        assert r.status == "ok", r.reason
    assert got[KERNEL_RECIPE].table.num_rows > 0
