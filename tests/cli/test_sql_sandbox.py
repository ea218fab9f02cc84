"""Issue 30: a reader cannot change what writers trust.  The default `taxbreak sql` writes no file under the lake,
the marts, the exports or the warehouse (no COPY / EXPORT / ATTACH / PREPARE; -o refused there), and a writer acts
on no manifest that names a path outside the marts folder.  On the mixed scenario trace (tests/sql/scenarios.py)."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pytest

from taxbreak.cli import main
from taxbreak.store.marts import MANIFEST, LocalMarts, confined, load_manifest, manifest_problem
from taxbreak.store.query import SandboxRefused, check_output, interactive, open_readonly


def _paths(home: Path) -> list[str]:
    return ["--lake", str(home / "lake"), "--warehouse", str(home / "taxbreak.duckdb")]


def _state(home: Path) -> dict[str, str]:
    """Every file of the lake, marts, exports and the warehouse, by content (a reader's own pin, which only delays
    the deletion of replaced marts files while it is open, left out: marts.pin_reader)."""
    out = {}
    for p in sorted(home.rglob("*")):
        if p.is_file() and not p.name.endswith(".lock") and p.parent.name != ".readers":
            out[str(p.relative_to(home))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture
def analyzed(home: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    assert main(["analyze", "-q", *_paths(home)]) == 0
    capsys.readouterr()
    return home


def test_no_statement_of_the_sandbox_writes_a_file(analyzed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = analyzed
    (part,) = (home / "lake" / "events").glob("trace_id=*/part-0.parquet")
    manifest = home / "marts" / MANIFEST
    before = _state(home)
    hostile = {
        "COPY": f"COPY (SELECT * FROM events LIMIT 1) TO '{part}' (FORMAT parquet)",
        "EXPORT": f"EXPORT DATABASE '{home / 'exports' / 'dump'}'",
        "ATTACH": f"ATTACH '{home / 'lake' / 'new.duckdb'}' AS n",
        "PREPARE": f"PREPARE p AS COPY (SELECT 1 AS x) TO '{manifest}'",
    }
    for kind, query in hostile.items():
        assert main(["sql", query, *_paths(home)]) == 1, query
        err = capsys.readouterr().err
        assert f"taxbreak sql: {kind} statements are not run by the sandbox" in err, err
    # a write behind a harmless first statement is refused before either runs
    assert main(["sql", f"SELECT 1; COPY (SELECT 2) TO '{home / 'marts' / 'x.csv'}'", *_paths(home)]) == 1
    assert "COPY statements are not run" in capsys.readouterr().err
    # -o is written by taxbreak: refused into the lake, marts, exports or onto the warehouse file
    for target in (part, manifest, home / "exports" / "r.csv", home / "taxbreak.duckdb"):
        assert main(["sql", "--format", "csv", "-o", str(target), "SELECT 1 AS x", *_paths(home)]) == 1
        assert f"taxbreak sql: {target}: is in the warehouse's own files" in capsys.readouterr().err
    assert _state(home) == before  # nothing written, nothing replaced
    # the interactive prompt refuses them too and goes on
    opened = open_readonly(home / "taxbreak.duckdb", home / "lake", sandbox=True)
    try:
        assert interactive(opened, stdin=io.StringIO(f"COPY (SELECT 1) TO '{home / 'lake' / 'y.csv'}';\n"
                                                     "SELECT count(*) AS n FROM events WHERE kind = 'kernel';\n"),
                           fmt="csv") == 0
    finally:
        opened.con.close()
    out, err = capsys.readouterr()
    assert "COPY statements are not run" in err and out.split() == ["n", "9"]  # the mixed trace's 9 kernels
    assert _state(home) == before


def test_reads_and_outputs_elsewhere_still_work(analyzed: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    home = analyzed
    out = tmp_path / "results" / "n.json"
    out.parent.mkdir()
    assert main(["sql", "--format", "json", "-o", str(out), "CREATE TEMP VIEW k AS SELECT * FROM events "
                 "WHERE kind = 'kernel'; SELECT count(*) AS n FROM k", *_paths(home)]) == 0
    assert json.loads(out.read_text()) == [{"n": 9}]
    # --unrestricted is the user's explicit choice: COPY runs there
    copied = tmp_path / "c.csv"
    assert main(["sql", "--unrestricted", f"COPY (SELECT 5 AS x) TO '{copied}'", *_paths(home)]) == 0
    assert copied.read_text().split() == ["x", "5"]


def test_check_output_names_the_rooms(tmp_path: Path) -> None:
    wh = tmp_path / "w" / "taxbreak.duckdb"
    lake = tmp_path / "lake"
    for bad in (lake / "events" / "x.parquet", wh.parent / "marts" / "_manifest.json", wh.parent / "exports",
                wh, wh.with_name("taxbreak.duckdb.wal")):
        with pytest.raises(SandboxRefused, match="warehouse's own files"):
            check_output(str(bad), wh, lake)
    check_output(str(wh.parent / "result.csv"), wh, lake)  # beside the warehouse, not in its rooms: fine
    check_output(str(tmp_path / "lake2.csv"), wh, lake)  # a name that merely starts like the lake
    check_output(None, wh, lake)


def _forge(marts: Path, **change: object) -> None:
    data = json.loads((marts / MANIFEST).read_text())
    data.update(change)
    (marts / MANIFEST).write_text(json.dumps(data))


def test_a_forged_manifest_is_not_acted_on(analyzed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           caplog: pytest.LogCaptureFixture) -> None:
    home = analyzed
    marts = home / "marts"
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("precious")
    good = load_manifest(LocalMarts(marts))
    assert good is not None and manifest_problem(good) is None
    rel_out = "../" * 1 + "victim"  # marts/../victim: outside the marts folder
    _forge(marts, replaced=[[rel_out, 0], [str(victim), 0]])
    assert load_manifest(LocalMarts(marts)) is None  # not acted on: the next writer rewrites the layout whole
    forged = (marts / MANIFEST).read_text()
    with caplog.at_level("WARNING", logger="taxbreak.marts"):
        assert main(["analyze", "-q", *_paths(home)]) == 0  # a writer after the forgery
    assert (victim / "keep.txt").read_text() == "precious"
    # said, not silent (issue 30): which manifest, why, what the writer did instead; the forgery kept for a look
    (said,) = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert said == (f"taxbreak: {marts / MANIFEST}: refused, not acted on: replaced: ['../victim', 0] is not a path "
                    "inside the marts folder — the marts are rewritten whole from the warehouse, deleting nothing "
                    f"it names; kept as {marts / MANIFEST}.refused")
    assert (marts / f"{MANIFEST}.refused").read_text() == forged
    assert load_manifest(LocalMarts(marts)) is not None  # rewritten whole, valid again
    capsys.readouterr()
    assert main(["sql", "--format", "csv", "SELECT count(*) AS n FROM kernel_taxbreak", *_paths(home)]) == 0
    assert capsys.readouterr().out.split() == ["n", "9"]


@pytest.mark.parametrize(("field", "value", "named"), [
    ("tables", ["kernel_taxbreak", "../x"], "tables: '../x'"),
    ("replaced", [["/etc", 0]], "replaced: ['/etc', 0]"),
    ("replaced", [["a/../../b", 0]], "replaced: ['a/../../b', 0]"),
    ("parts", {"kernel_taxbreak/trace_id=a": "../../x.parquet"}, "parts: 'kernel_taxbreak/trace_id=a'"),
    ("segments", {"1-a": {"files": {"kernel_taxbreak": "/tmp/x.parquet"}, "traces": [], "seq": 1, "tier": 0}},
     "segments.1-a.files"),
    ("traces", {"a/b": ["", 0, 0]}, "traces: 'a/b'"),
])
def test_manifest_problem_names_the_field(field: str, value: object, named: str) -> None:
    from taxbreak.store.marts import Manifest

    m = Manifest(tables=["kernel_taxbreak"], columns={"kernel_taxbreak": [["trace_id", "VARCHAR"]]})
    setattr(m, field, value)
    problem = manifest_problem(m)
    assert problem is not None and problem.startswith(named), problem


def test_confined_and_delete(tmp_path: Path) -> None:
    assert confined("kernel_taxbreak/seg-1.parquet") and confined("t/trace_id=ab")
    for bad in ("", "/abs", "..", "a/../..", "a//b", "a\\b", "./a", None, 3):
        assert not confined(bad), bad
    outside = tmp_path / "outside.txt"
    outside.write_text("x")
    (tmp_path / "m").mkdir()
    LocalMarts(tmp_path / "m").delete(["../outside.txt", str(outside)])
    assert outside.exists()
