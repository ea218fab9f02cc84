"""Issue 13: one writer rule for every writer, readers with a consistent view while it works, and a killed
``taxbreak analyze`` that leaves every table as it was before the run or as it is after it, never a mix."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from cli_support import FUSION_ID, MIXED_ID, Run, add_fusion, build_mixed

from taxbreak.engine.plan import plan_tables, sql_files
from taxbreak.store.faults import FAULT_ENV
from taxbreak.store.warehouse import snapshot_path

KEPT = [f.name for f in sql_files() if f.materialize != "temp"]


def table_state(db: Path) -> dict[str, tuple[int, tuple[str, ...]]]:
    """Per kept table: its row count and the trace ids it holds (the state a run publishes)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        out = {}
        for name in KEPT:
            cols = {r[0] for r in con.execute(
                "SELECT column_name FROM duckdb_columns() WHERE table_name = $t", {"t": name}).fetchall()}
            if not cols:
                out[name] = (-1, ())
                continue
            n = con.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]
            ids = tuple(r[0] for r in con.execute(
                f'SELECT DISTINCT trace_id FROM "{name}" ORDER BY 1').fetchall()) if "trace_id" in cols else ()
            out[name] = (n, ids)
        return out
    finally:
        con.close()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A home whose warehouse holds the mixed trace alone ('before') while its lake holds mixed + fusion, and the
    state a clean full run over both gives ('after', computed in a copy).  Built once; tests copy the home."""
    base = tmp_path_factory.mktemp("template")
    home = base / "home"
    build_mixed(home / "lake")
    _analyze(home)
    before = table_state(home / "taxbreak.duckdb")
    add_fusion(home / "lake")
    shutil.copytree(home / "lake", base / "clean" / "lake")
    _analyze(base / "clean")
    after = table_state(base / "clean" / "taxbreak.duckdb")
    assert before != after and before["trace_meta"][1] == (MIXED_ID,) and after["trace_meta"][1] == (
        MIXED_ID, FUSION_ID)
    return {"home": home, "before": before, "after": after}


def _analyze(home: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "taxbreak.cli", "analyze", "-q", "--lake", str(home / "lake"),
                           "--warehouse", str(home / "taxbreak.duckdb")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture
def states(home: Path, template: dict) -> dict:
    """``home`` (the runner's folder) set to a copy of the template: the 'before' warehouse, both traces in the lake."""
    shutil.rmtree(home / "lake")
    shutil.copytree(template["home"], home, dirs_exist_ok=True)
    return template


_NAMES = plan_tables()
_KEPT_ORDER = [n for n in _NAMES if n in KEPT]
# (run over every trace or only the new one, the point where it is killed): the first table published, one in the
# middle, the last file, and the moment before the commit
KILLS = [(False, f"publish:{_KEPT_ORDER[0]}"), (False, f"publish:{_KEPT_ORDER[len(_KEPT_ORDER) // 2]}"),
         (False, f"publish:{_NAMES[-1]}"), (False, "before_commit"),
         (True, f"publish:{_KEPT_ORDER[len(_KEPT_ORDER) // 2]}"), (True, "before_commit"),
         (True, "run_computed")]  # a run for some traces, killed after computing in its own file, before the lock


@pytest.mark.parametrize(("only_new", "point"), KILLS, ids=[("one-trace-" if o else "all-") + p for o, p in KILLS])
def test_a_killed_analyze_changes_nothing(home: Path, run: Run, states: dict, point: str, only_new: bool) -> None:
    args = ["analyze", "-q"] + (["--trace", FUSION_ID[:12]] if only_new else [])
    proc = run(*args, env={FAULT_ENV: point})
    assert proc.returncode == -9, (point, proc.returncode, proc.stderr)  # SIGKILLed at the point
    assert table_state(home / "taxbreak.duckdb") == states["before"]
    # readers see the state before it too
    sql = run("sql", "--format", "csv", "SELECT count(*) AS n FROM trace_meta")
    assert sql.returncode == 0 and sql.stdout.split() == ["n", "1"], sql.stderr
    runs = home / "taxbreak.duckdb.runs"
    left = sorted(p.name for p in runs.rglob("run_*.duckdb")) if runs.exists() else []
    assert len(left) == (1 if only_new else 0), left  # a killed run for some traces leaves its own file behind
    if point in ("before_commit", "run_computed"):  # and the next run completes the work
        assert run(*args).returncode == 0
        assert table_state(home / "taxbreak.duckdb") == states["after"]
        assert not list(runs.rglob("run_*")) if runs.exists() else True  # the dead run's file was cleared


def test_killed_after_the_commit_readers_read_the_committed_tables(home: Path, run: Run, states: dict) -> None:
    assert run("analyze", "-q", env={FAULT_ENV: "after_commit"}).returncode == -9
    db = home / "taxbreak.duckdb"
    assert table_state(db) == states["after"]
    # the snapshot still holds the run before: it is older than the file, so readers read the file
    snap = duckdb.connect(str(snapshot_path(db)), read_only=True)
    assert snap.execute("SELECT count(*) FROM trace_meta").fetchone()[0] == 1
    snap.close()
    sql = run("sql", "--format", "csv", "SELECT count(*) AS n FROM trace_meta")
    assert sql.returncode == 0 and sql.stdout.split() == ["n", "2"], sql.stderr


def test_killed_while_publishing_the_snapshot(home: Path, run: Run, states: dict) -> None:
    db = home / "taxbreak.duckdb"
    assert run("analyze", "-q", env={FAULT_ENV: "snapshot_copied"}).returncode == -9
    exports = db.parent / "exports"
    assert [p.name for p in exports.glob(".snapshot.duckdb.*.tmp")]  # the copy of the dead writer
    sql = run("sql", "--format", "csv", "SELECT count(*) AS n FROM trace_meta")
    assert sql.returncode == 0 and sql.stdout.split() == ["n", "2"], sql.stderr
    assert run("analyze", "-q", "--table", "trace_meta").returncode == 0
    assert not list(exports.glob(".snapshot.duckdb.*.tmp"))  # the next writer removed it
    assert table_state(snapshot_path(db))["trace_meta"] == states["after"]["trace_meta"]


def test_two_analyze_runs_at_once_both_succeed(home: Path, run: Run, states: dict) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAXBREAK_")} | {"TAXBREAK_HOME": str(home)}
    procs = [subprocess.Popen([sys.executable, "-m", "taxbreak.cli", "analyze", "-q"], cwd=home, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1] for o in outs]
    assert table_state(home / "taxbreak.duckdb") == states["after"]


def _holder(code: str, home: Path) -> subprocess.Popen:
    """A process that runs ``code`` (db bound to the warehouse path), prints 'ready' and waits for stdin to close."""
    script = ("import sys, duckdb\nfrom pathlib import Path\nfrom taxbreak.store.warehouse import writer\n"
              f"db = Path({str(home / 'taxbreak.duckdb')!r})\n{code}")
    p = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def test_readers_and_a_second_writer_while_a_writer_works(home: Path, run: Run, states: dict) -> None:
    holder = _holder("with writer(db) as con:\n    print('ready', flush=True)\n    sys.stdin.read()\n", home)
    try:
        sql = run("sql", "--format", "csv", "SELECT count(*) AS n FROM trace_meta")
        assert sql.returncode == 0 and sql.stdout.split() == ["n", "1"], sql.stderr
        summ = run("summary", "mixed.json")
        assert summ.returncode == 0 and "HDBI 0.152" in summ.stdout, summ.stderr
        # the replay reads through the readers' one opener too (the snapshot while the file is held)
        wi = run("whatif", "mixed.json", "--host-speedup", "2", "--json")
        assert wi.returncode == 0, wi.stderr
        assert [s["scope_kind"] for s in json.loads(wi.stdout)[0]["scopes"]][0] == "trace"
        t0 = time.monotonic()
        second = run("analyze", env={"TAXBREAK_WRITER_WAIT_S": "1"})
        assert second.returncode == 3 and time.monotonic() - t0 < 60
        assert "another writer" in second.stderr and "Traceback" not in second.stderr
        assert "waiting for another writer" in second.stderr
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert table_state(home / "taxbreak.duckdb") == states["before"]


def test_a_writer_waits_for_a_reader_holding_the_file(home: Path, run: Run, states: dict) -> None:
    reader = _holder("c = duckdb.connect(str(db), read_only=True)\nprint('ready', flush=True)\nsys.stdin.read()\n",
                     home)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAXBREAK_")} | {"TAXBREAK_HOME": str(home)}
    writer_proc = subprocess.Popen([sys.executable, "-m", "taxbreak.cli", "analyze"], cwd=home, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # release the reader only once the writer says it waits for it (a fixed sleep races a loaded machine)
    first = writer_proc.stderr.readline()
    while first and "waiting for a reader to close" not in first:
        first = writer_proc.stderr.readline()
    assert "waiting for a reader to close" in first
    assert writer_proc.poll() is None
    reader.stdin.close()
    reader.wait(timeout=30)
    out, err = writer_proc.communicate(timeout=120)
    assert writer_proc.returncode == 0, first + err
    assert table_state(home / "taxbreak.duckdb") == states["after"]
