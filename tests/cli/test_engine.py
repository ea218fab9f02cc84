"""The one run (taxbreak.engine.runner): `taxbreak analyze` refuses to publish a broken invariant (exit 4, the check,
its
table and the failing row count named, every warehouse table and the readers' snapshot unchanged), and analyze,
retry, the demo and forget all go through the engine (its hook events)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import duckdb
import pytest
from cli_support import FUSION_ID, MIXED_ID, add_fusion

from taxbreak.cli import EXIT_INVARIANT_BROKEN, main
from taxbreak.engine import runner
from taxbreak.engine.checks import check_files
from taxbreak.store.warehouse import snapshot_path


def _common(home: Path) -> list[str]:
    return ["--lake", str(home / "lake"), "--warehouse", str(home / "wh.duckdb")]


def _break_hdbi_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hdbi check made to flag every trace row (an invariant the computed rows break)."""
    broken = [dataclasses.replace(c, text="SELECT trace_id, hdbi FROM taxbreak_by_scope WHERE scope_kind = 'trace'")
              if c.name == "hdbi_in_unit_interval" else c for c in check_files()]
    monkeypatch.setattr(runner, "check_files", lambda: broken)


def _differences(db: Path, before: Path) -> dict[str, int]:
    """Rows per table that differ between the warehouse and its copy (EXCEPT ALL both ways), and tables only in one."""
    out: dict[str, int] = {}
    with duckdb.connect(str(db), read_only=True) as con:
        con.execute(f"ATTACH '{before}' AS before (READ_ONLY)")
        tables = {d: {r[0] for r in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = $d", {"d": d}).fetchall()}
            for d in ("wh", "before")}
        for t in tables["wh"] ^ tables["before"]:
            out[t] = -1
        for t in sorted(tables["wh"] & tables["before"]):
            (n,) = con.execute(f'SELECT (SELECT count(*) FROM (SELECT * FROM wh.main."{t}" EXCEPT ALL SELECT * FROM '
                               f'before.main."{t}")) + (SELECT count(*) FROM (SELECT * FROM before.main."{t}" '
                               f'EXCEPT ALL SELECT * FROM wh.main."{t}"))').fetchone()
            if n:
                out[t] = int(n)
    return out


@pytest.mark.parametrize("some_traces", [False, True], ids=["all_traces", "one_trace"])
def test_analyze_refuses_to_publish_a_broken_invariant(home: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str], some_traces: bool) -> None:
    add_fusion(home / "lake")
    db = home / "wh.duckdb"
    assert main(["analyze", *_common(home)]) == 0
    capsys.readouterr()
    before = home / "before.duckdb"
    shutil.copyfile(db, before)
    snap = snapshot_path(db)
    snap_ns = snap.stat().st_mtime_ns
    # a run that would change rows (another T_sys), with an invariant its rows break
    _break_hdbi_check(monkeypatch)
    args = ["analyze", "--t-sys-ns", "9999", *(["--trace", MIXED_ID[:12]] if some_traces else []), *_common(home)]
    assert main(args) == EXIT_INVARIANT_BROKEN == 4
    err = capsys.readouterr().err
    flagged = 1 if some_traces else 2  # the trace rows of the run's traces
    scopes = 0
    with duckdb.connect(str(before), read_only=True) as con:
        scopes = con.execute("SELECT count(*) FROM taxbreak_by_scope" + (
            f" WHERE trace_id = '{MIXED_ID}'" if some_traces else "")).fetchone()[0]
    assert "nothing published" in err
    assert (f"broken invariant hdbi_in_unit_interval ({Path(check_files()[0].path).parent}/hdbi_in_unit_interval.sql)"
            f": {flagged} of {scopes} row(s) of table taxbreak_by_scope break it") in err
    assert _differences(db, before) == {}  # every warehouse table as it was
    assert snap.stat().st_mtime_ns == snap_ns  # and the readers' snapshot
    # the same run with the invariants intact publishes, and changes the rows it would have changed
    monkeypatch.undo()
    assert main(args) == 0
    changed = _differences(db, before)
    assert changed["kernel_taxbreak"] > 0 and changed["taxbreak_by_scope"] > 0


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[str] | None, list[str]]]:
    """runner.run wrapped: each call's traces and the kinds of events its hooks were told, in order."""
    calls: list[tuple[list[str] | None, list[str]]] = []
    real = runner.run

    def spy(paths, traces=None, tables=None, config=None, hooks=None, **kw):  # noqa: ANN001, ANN202
        kinds: list[str] = []

        def hook(event: runner.Event) -> None:
            kinds.append(event.kind)
            if hooks is not None:
                hooks(event)

        calls.append((traces, kinds))
        return real(paths, traces, tables, config, hook, **kw)

    monkeypatch.setattr(runner, "run", spy)
    return calls


def _in_order(kinds: list[str]) -> list[str]:
    """The distinct event kinds in the order first told."""
    return list(dict.fromkeys(kinds))


def test_analyze_retry_and_the_demo_go_through_the_engine(home: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from taxbreak import demo
    from taxbreak.config import Paths
    from taxbreak.engine.plan import plan_tables
    from taxbreak.features.retry import rebuild_tables

    calls = _spy(monkeypatch)
    n_checks = len(check_files())
    # the demo, on a warehouse the pipeline did not build: the one run over every trace
    paths = dataclasses.replace(Paths.from_env(home), lake=home / "lake", warehouse=home / "wh.duckdb")
    demo._print_analysis(paths, [MIXED_ID])
    assert "HDBI 0.152" in capsys.readouterr().out
    traces, kinds = calls[-1]
    assert traces is None
    assert _in_order(kinds) == ["table_started", "table", "computed", "check", "published"]
    assert kinds.count("check") == n_checks and snapshot_path(paths.warehouse).exists()
    # analyze for one trace
    add_fusion(home / "lake")
    assert main(["analyze", "--trace", FUSION_ID[:12], *_common(home)]) == 0
    traces, kinds = calls[-1]
    assert traces == [FUSION_ID] and kinds.count("check") == n_checks and kinds[-1] == "published"
    assert kinds.index("computed") < kinds.index("check") < kinds.index("published")
    # retry's rebuild: computed outside the lock, checked, published; its counts in the plan's order
    counts = rebuild_tables(paths.warehouse, paths.lake, [MIXED_ID])
    traces, kinds = calls[-1]
    assert traces == [MIXED_ID] and kinds.count("check") == n_checks and kinds[-1] == "published"
    assert list(counts) == [n for n in plan_tables() if n in counts] and counts["kernel_taxbreak"] == 9
    with duckdb.connect(str(paths.warehouse), read_only=True) as con:
        assert con.execute("SELECT count(DISTINCT trace_id) FROM kernel_taxbreak").fetchone()[0] == 2


def test_forget_publishes_through_the_engine(home: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    add_fusion(home / "lake")
    assert main(["analyze", *_common(home)]) == 0
    published: list[tuple[str, list[str] | None]] = []
    real = runner.publish

    def spy(paths, write, **kw):  # noqa: ANN001, ANN202
        hooks = kw.pop("hooks", None)

        def hook(event: runner.Event) -> None:
            published.append((event.name, event.trace_ids))
            if hooks is not None:
                hooks(event)

        return real(paths, write, hooks=hook, **kw)

    monkeypatch.setattr(runner, "publish", spy)
    assert main(["forget", FUSION_ID[:12], *_common(home)]) == 0
    assert published == [("forget", [FUSION_ID])]
    with duckdb.connect(str(home / "wh.duckdb"), read_only=True) as con:
        assert con.execute("SELECT DISTINCT trace_id FROM kernel_taxbreak").fetchall() == [(MIXED_ID,)]
