"""Issue 30: ``forget`` is atomic with respect to concurrent writers.  Once it returns 0, no warehouse table, mart
or snapshot holds the trace, whatever ran beside it: a run for the trace that computed before the forget and
publishes after it publishes nothing of it (taxbreak.engine.analysis.publish_run reads the catalogue under the writer
lock, and forget removes the catalogue row under that lock).  On the mixed and fusion scenario traces
(tests/sql/scenarios.py: fusion has 10 kernels, mixed 9)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from cli_support import FUSION_ID, MIXED_ID, Run, add_fusion
from reliability.suite import holders  # every place the trace could still be found (shared with the bench)

from taxbreak.cli import main
from taxbreak.engine.analysis import compute_run, publish_run
from taxbreak.ingest import Lake
from taxbreak.store.faults import FAULT_ENV
from taxbreak.store.warehouse import writer


def _paths(home: Path) -> list[str]:
    return ["--lake", str(home / "lake"), "--warehouse", str(home / "taxbreak.duckdb")]


def _kernels(home: Path, trace_id: str) -> int:
    con = duckdb.connect(str(home / "taxbreak.duckdb"), read_only=True)
    try:
        return con.execute("SELECT count(*) FROM kernel_taxbreak WHERE trace_id = $t", {"t": trace_id}).fetchone()[0]
    finally:
        con.close()


def test_a_run_computed_before_a_forget_publishes_nothing_of_it(home: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    add_fusion(home / "lake")
    assert main(["analyze", "-q", *_paths(home)]) == 0
    assert _kernels(home, FUSION_ID) == 10
    wh, lake = home / "taxbreak.duckdb", home / "lake"
    # `analyze --trace fusion.json` computes (outside the lock), `forget fusion.json` runs whole, then the run
    # publishes: the interleaving that brought the trace back in 3 of 13 races before issue 30
    with compute_run(wh, lake, [FUSION_ID, MIXED_ID]) as run:
        assert run.trace_ids == sorted([FUSION_ID, MIXED_ID])
        assert main(["forget", "fusion.json", *_paths(home)]) == 0
        with writer(wh, traces=run.trace_ids) as con:
            counts = publish_run(con, run)
    assert run.trace_ids == [MIXED_ID] and counts
    assert holders(home, FUSION_ID) == []
    assert _kernels(home, MIXED_ID) == 9  # the other trace of the run is published
    # a run of only the forgotten trace publishes nothing and says so (no counts)
    add_fusion(lake)
    with compute_run(wh, lake, [FUSION_ID]) as run:
        assert main(["forget", "fusion.json", *_paths(home)]) == 0
        with writer(wh, traces=run.trace_ids) as con:
            assert publish_run(con, run) == {}
    assert holders(home, FUSION_ID) == []
    capsys.readouterr()


def test_a_trace_forgotten_while_the_run_reads_the_lake(home: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """The run listed the trace's lake file, then `forget` removed it before the run read it (the interleaving that
    gave analyze a traceback in a CI race): the run computes the traces still ingested again, no error."""
    from taxbreak.engine import analysis

    add_fusion(home / "lake")
    assert main(["analyze", "-q", *_paths(home)]) == 0
    wh, lake = home / "taxbreak.duckdb", home / "lake"
    real, calls = analysis._stage, []  # noqa: SLF001 - the step that reads the lake files listed before it

    def stage(*args, **kw):  # noqa: ANN002, ANN003, ANN202
        if not calls:
            Lake(lake).events_path(FUSION_ID).unlink()
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(analysis, "_stage", stage)
    with compute_run(wh, lake, [FUSION_ID, MIXED_ID]) as run:
        assert run.trace_ids == [MIXED_ID] and len(calls) == 2 and run.counts["kernel_taxbreak"] == 9
    calls.clear()
    add_fusion(lake)
    with compute_run(wh, lake, [FUSION_ID]) as run:  # nothing left: an empty run, which publishes nothing
        assert run.trace_ids == [] and run.counts == {} and run.kept == []
    capsys.readouterr()


def test_forget_without_a_warehouse_takes_the_lock(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    add_fusion(home / "lake")
    assert main(["forget", "fusion.json", *_paths(home)]) == 0
    assert Lake(home / "lake").catalogue_row(FUSION_ID) is None
    assert not (home / "taxbreak.duckdb").exists()  # the lock only: no empty warehouse is created
    assert (home / "taxbreak.duckdb.lock").exists()
    capsys.readouterr()


def _cli(home: Path, *args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAXBREAK_")}
    return subprocess.Popen([sys.executable, "-m", "taxbreak.cli", *args, *_paths(home)], cwd=home, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_analyze_and_forget_racing(home: Path) -> None:
    """Real processes started together, in both orders; whenever forget returns 0, nothing holds the trace."""
    assert main(["analyze", "-q", *_paths(home)]) == 0
    for first in ("analyze", "forget"):
        add_fusion(home / "lake")
        assert main(["analyze", "-q", "--trace", "fusion.json", *_paths(home)]) == 0
        procs = {"analyze": lambda: _cli(home, "analyze", "-q", "--trace", FUSION_ID[:16]),
                 "forget": lambda: _cli(home, "forget", FUSION_ID[:16])}
        order = [first, "forget" if first == "analyze" else "analyze"]
        running = {name: procs[name]() for name in order}
        rcs = {name: p.wait(timeout=300) for name, p in running.items()}
        errs = {name: p.stderr.read() for name, p in running.items()}
        assert rcs["forget"] == 0, errs
        # analyze either published before the forget (then forgotten), or found nothing left to publish, or
        # found the trace gone when it looked it up (exit 2, named)
        assert rcs["analyze"] in (0, 2), errs
        assert holders(home, FUSION_ID) == [], (first, errs)
        assert _kernels(home, MIXED_ID) == 9


@pytest.mark.parametrize("point", ["marts_staged", "marts_committed", "snapshot_copied"])
def test_a_forget_killed_after_the_lake_is_finished_by_forgetting_again(home: Path, run: Run, point: str) -> None:
    """Issue 30: a forget killed after it removed the trace from the lake, before the marts and the snapshot were
    republished.  Forgetting the trace again by its id finds it (the marts or a dead writer's pending marker still
    name it), deletes nothing more and lets the writer catch up: nothing holds it, no marker or temporary file
    stays.  It used to say "no trace matches" and leave the marts holding the trace until another writer ran."""
    add_fusion(home / "lake")
    assert run("analyze", "-q").returncode == 0
    assert run("forget", FUSION_ID[:16], env={FAULT_ENV: point}).returncode == -9
    assert Lake(home / "lake").catalogue_row(FUSION_ID) is None  # out of the lake already
    marts = home / "marts"
    assert list(marts.glob(".pending-*.json"))  # the dead writer's work, still to do
    again = run("forget", FUSION_ID[:16])
    assert again.returncode == 0, again.stderr
    assert holders(home, FUSION_ID) == []
    assert not list(marts.glob(".pending-*")) and not list(marts.glob(".staging-*"))
    assert not list((home / "exports").glob(".snapshot*.tmp*"))
    assert _kernels(home, MIXED_ID) == 9
    # once gone everywhere, the name is unknown again
    assert run("forget", FUSION_ID[:16]).returncode == 2
