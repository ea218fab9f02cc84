"""The real nsys path end to end: Debian's nsys 2022.4 profiles a tiny C program's NVTX ranges, the .nsys-rep goes
through our `nsys export` wrapper and the ranges arrive in the lake with their names and nesting.

tests/ingest/setup_nsys.sh installs nsys into .venv/nsys (cached; about 12 s and 600 MB the first time, from
Debian's non-free component). The test skips, saying why, when that or the C compiler is unavailable, or when
TAXBREAK_SKIP_NSYS_SETUP=1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from nsys_fixtures import STANDINS
from public_data import available

from taxbreak.ingest import Lake, ingest_file

HERE = Path(__file__).resolve().parent
SETUP = HERE / "setup_nsys.sh"
PROGRAM = r"""
#include <nvtx3/nvToolsExt.h>
#include <time.h>
static void spin_ms(long ms) {  /* busy wait: the ranges have a known minimum length */
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do { clock_gettime(CLOCK_MONOTONIC, &b); }
    while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < ms * 1000000L);
}
int main(void) {
    nvtxRangePushA("outer");
    for (int i = 0; i < 3; i++) {
        nvtxRangePushA("step");
        spin_ms(5);
        nvtxRangePushA("inner");
        spin_ms(2);
        nvtxRangePop();
        nvtxRangePop();
    }
    nvtxMarkA("done");
    nvtxRangePop();
    return 0;
}
"""
MS = 1_000_000


@pytest.fixture(scope="module")
def nsys() -> str:
    if os.environ.get("TAXBREAK_SKIP_NSYS_SETUP") == "1":
        pytest.skip("TAXBREAK_SKIP_NSYS_SETUP=1")
    try:
        proc = subprocess.run(["bash", str(SETUP)], capture_output=True, text=True, timeout=600, check=False)
    except subprocess.TimeoutExpired:
        pytest.skip("tests/ingest/setup_nsys.sh did not finish within 600 s")
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        pytest.skip(f"nsys could not be set up (setup_nsys.sh exit {proc.returncode}): {tail}")
    return proc.stdout.strip().splitlines()[-1]


def _build_program(nsys: str, folder: Path) -> Path:
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (gcc/cc) to build the NVTX test program")
    headers = sorted(Path(nsys).resolve().parents[1].rglob("nvtx3/nvToolsExt.h"))
    assert headers, f"no nvtx3/nvToolsExt.h beside {nsys}"
    src = folder / "nvtx_prog.c"
    src.write_text(PROGRAM)
    exe = folder / "nvtx_prog"
    subprocess.run([cc, "-O1", "-I", str(headers[0].parents[1]), str(src), "-o", str(exe), "-ldl"], check=True,
                   timeout=120)
    return exe


def test_nsys_profile_nvtx_ranges_reach_the_lake(nsys: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = _build_program(nsys, tmp_path)
    rep = tmp_path / "nvtx.nsys-rep"
    proc = subprocess.run(
        [nsys, "profile", "--trace=nvtx,osrt", "--sample=none", "--cpuctxsw=none", "--force-overwrite", "true",
         "--output", str(tmp_path / "nvtx"), str(exe)],
        capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0 and rep.exists(), proc.stdout + proc.stderr
    monkeypatch.setenv("TAXBREAK_NSYS", nsys)
    lake = Lake(tmp_path / "lake")
    res = ingest_file(rep, lake, cache_dir=tmp_path / "cache")
    assert res.status == "ingested", res.error
    assert res.row["source_format"] == "nsys-rep"
    # nsys 2022.4 writes no META_DATA_EXPORT; TARGET_INFO_SYSTEM_ENV names the install that captured the report.
    assert json.loads(res.row["tool_versions_json"])["nsys_capture_install_dir"] == str(Path(nsys).resolve().parent)
    counts = json.loads(res.row["event_counts_json"])
    assert (counts.get("nvtx_range"), counts.get("nvtx_mark")) == (7, 1)
    ev = [e for e in lake.read_events(res.trace_id).to_pylist() if e["kind"] in ("nvtx_range", "nvtx_mark")]
    ranges = sorted((e for e in ev if e["kind"] == "nvtx_range"), key=lambda e: e["ts_ns"])
    assert Counter(e["name"] for e in ranges) == {"outer": 1, "step": 3, "inner": 3}
    assert len({(e["pid"], e["tid"]) for e in ev}) == 1  # one thread pushed and popped everything
    (outer,) = [e for e in ranges if e["name"] == "outer"]
    steps = [e for e in ranges if e["name"] == "step"]
    inners = [e for e in ranges if e["name"] == "inner"]
    (mark,) = [e for e in ev if e["kind"] == "nvtx_mark"]
    assert outer["ts_ns"] == 0  # the earliest stored event: OSRT_API is not read by default
    assert mark["name"] == "done" and mark["dur_ns"] is None

    def inside(a: dict, b: dict) -> bool:
        return b["ts_ns"] <= a["ts_ns"] and a["ts_ns"] + a["dur_ns"] <= b["ts_ns"] + b["dur_ns"]

    for step, inner in zip(steps, inners, strict=True):  # ordered by start: inner i sits in step i only
        assert inside(step, outer) and inside(inner, step)
        assert [s for s in steps if inside(inner, s)] == [step]
        assert step["dur_ns"] >= 7 * MS and inner["dur_ns"] >= 2 * MS
        assert inner["ts_ns"] - step["ts_ns"] >= 5 * MS  # the 5 ms spin before the inner push
    assert all(a["ts_ns"] + a["dur_ns"] <= b["ts_ns"] for a, b in zip(steps, steps[1:], strict=False))
    assert steps[-1]["ts_ns"] + steps[-1]["dur_ns"] <= mark["ts_ns"] <= outer["ts_ns"] + outer["dur_ns"]
    assert outer["dur_ns"] >= 21 * MS
    # The export is cached under the report's hash: a forced re-ingest reuses it without nsys.
    monkeypatch.setenv("TAXBREAK_NSYS", str(tmp_path / "no-such-nsys"))
    again = ingest_file(rep, lake, cache_dir=tmp_path / "cache", force=True)
    assert again.status == "ingested", again.error
    assert again.row["event_count"] == res.row["event_count"]


# Kernel names and instances in each public export, recounted by tests/ingest/test_nsys_sqlite.py from the raw file.
PUBLIC_KERNELS = {"nsys-ai/h100_2gpu_1s.sqlite": (41, 3442), "nsys-ai/mfu_2gpu_before.sqlite": (27, 4010),
                  "nsys-ai/mock.sqlite": (2, 2), "nvfuser/ee4fcf30/report1.sqlite": (16, 18)}
# The stand-ins for the two exports that are not vendored (tests/ingest/nsys_fixtures.py): names, kernels, total ns.
STANDIN_KERNELS = {"generated/two_gpu_nccl.sqlite": (3, 6, 9000), "generated/nsys2025_nvfuser.sqlite": (4, 4, 3000)}


@pytest.mark.parametrize("rel", available(PUBLIC_KERNELS) + sorted(STANDIN_KERNELS))
def test_nsys_check_agrees_with_real_nsys_stats(nsys: str, rel: str, tmp_path: Path,
                                                public_trace: Callable[[str], Path]) -> None:
    """`taxbreak nsys-check` against Nsight's own kernel summary (nsys 2022.4 names it `gpukernsum`), per name."""
    assert set(STANDIN_KERNELS) == set(STANDINS)
    export = tmp_path / Path(rel).name
    if rel in STANDINS:
        STANDINS[rel](export)
    else:
        shutil.copyfile(public_trace(rel), export)  # nsys stats gets a copy: nothing may touch ../shared
    env = {**os.environ, "TAXBREAK_NSYS": nsys, "TAXBREAK_LAKE": str(tmp_path / "lake"),
           "TAXBREAK_WAREHOUSE": str(tmp_path / "wh.duckdb")}
    taxbreak = Path(os.sys.executable).with_name("taxbreak")
    proc = subprocess.run([str(taxbreak), "nsys-check", str(export)], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    names, kernels, *total = {**PUBLIC_KERNELS, **STANDIN_KERNELS}[rel]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith(f"OK: {names} kernel names, {kernels:,} kernels, "), proc.stdout
    assert not total or proc.stdout.startswith(f"OK: {names} kernel names, {kernels:,} kernels, {total[0]:,} ns "
                                               "agree with the kernel summary of nsys stats"), proc.stdout
    # and the comparison can fail: one kernel fewer in the lake is a mismatch naming that kernel
    from taxbreak.ingest.nsys_rep import compare_summaries, lake_kernel_summary, nsys_kernel_summary

    ours = lake_kernel_summary(tmp_path / "lake", ingest_file(export, Lake(tmp_path / "lake")).trace_id)
    theirs = nsys_kernel_summary(nsys, export)
    assert compare_summaries(ours, theirs) == []
    name, (count, total) = next(iter(sorted(ours.items())))
    ours[name] = (count - 1, total)
    (diff,) = compare_summaries(ours, theirs)
    assert diff.startswith(name[:60]) and f"taxbreak ({count - 1}, {total}) vs nsys ({count}, {total})" in diff
