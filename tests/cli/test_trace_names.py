"""Trace names as users type them (issue 24): every command that takes TRACE resolves it through the one resolver
(taxbreak.store.tracenames) and behaves the same: the id prefix, the file name, its stem without suffixes and a unique
substring name a trace; an ambiguous name exits 2 listing the candidates; an unknown one says "no trace matches X",
and a known but unanalysed one says to run `taxbreak analyze`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the scenario builders live in tests/sql

from sql.scenarios import mixed_rows, write_trace  # noqa: E402

from taxbreak.cli import main  # noqa: E402
from taxbreak.ingest import Lake  # noqa: E402
from taxbreak.store.tracenames import TraceAmbiguous, TraceNotFound, match, resolve, stem  # noqa: E402

EAGER_GZ = "1" * 64
EAGER_SQLITE = "2" * 64
COMPILED = "3" * 64
LATE = "4" * 64  # ingested, never analysed
FILES = {EAGER_GZ: "eager_trace.json.gz", EAGER_SQLITE: "eager_trace.sqlite", COMPILED: "compiled_run.pt.trace.json",
         LATE: "late_run.json"}
CANDS = list(FILES.items())


def test_resolver_rules_in_order() -> None:
    assert stem("runs/Eager_Trace.json.gz") == "eager_trace" and stem("a.pt.trace.json") == "a"
    assert stem("report1.nsys-rep") == "report1" and stem("x.sqlite") == "x"
    assert resolve(CANDS, "333") == COMPILED  # id prefix
    assert resolve(CANDS, "eager_trace.json.gz") == EAGER_GZ  # the file name (its stem is ambiguous)
    assert resolve(CANDS, "/data/in/eager_trace.sqlite") == EAGER_SQLITE  # a path: its file name
    assert resolve(CANDS, "compiled_run") == COMPILED  # the stem
    assert resolve(CANDS, "COMPILED") == COMPILED  # a unique substring, any case
    with pytest.raises(TraceAmbiguous) as amb:
        resolve(CANDS, "eager_trace")  # the stem of two files
    assert amb.value.candidates == [(EAGER_GZ, FILES[EAGER_GZ]), (EAGER_SQLITE, FILES[EAGER_SQLITE])]
    assert str(amb.value) == (f"'eager_trace' matches 2 traces: {EAGER_GZ[:16]} eager_trace.json.gz; "
                              f"{EAGER_SQLITE[:16]} eager_trace.sqlite; give more of the trace id or the whole file "
                              "name")
    assert [t for t, _ in match(CANDS, "run")] == [COMPILED, LATE]  # substring: both
    with pytest.raises(TraceNotFound, match="^no trace matches 'nope'$"):
        resolve(CANDS, "nope")
    assert match(CANDS, "  ") == []


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("names")
    lake = Lake(home / "lake")
    for tid, name in FILES.items():
        write_trace(lake, tid, mixed_rows(tid), gpu="NVIDIA H100 80GB HBM3", file_name=name)
    # analyze resolves its --trace names with the same rules: a stem, a substring and a whole file name
    assert main(["analyze", "-q", "--trace", "compiled_run", "--trace", "json.gz", "--trace", "eager_trace.sqlite",
                 *_paths(home)]) == 0
    return home


def _paths(home: Path) -> list[str]:
    return ["--lake", str(home / "lake"), "--warehouse", str(home / "wh" / "taxbreak.duckdb")]


def _wh(home: Path) -> list[str]:
    return ["--warehouse", str(home / "wh" / "taxbreak.duckdb")]


def _commands(home: Path, tmp: Path) -> dict[str, callable]:
    """argv for each command that takes one TRACE, for a name."""
    p, w = _paths(home), _wh(home)
    return {
        "summary": lambda n: ["summary", n, *p],
        "export": lambda n: ["export", n, "-o", str(tmp / "x.chrome.json"), *w],
        "whatif": lambda n: ["whatif", n, *p],
        "requests": lambda n: ["requests", n, *w],
        "compare": lambda n: ["compare", n, "compiled_run.pt.trace.json", *w],
        "report": lambda n: ["report", "--trace", n, "-o", str(tmp / "rep"), *w],
    }


@pytest.mark.parametrize("command", ["summary", "export", "whatif", "requests", "compare", "report"])
def test_every_command_resolves_names_the_same(home: Path, tmp_path: Path, command: str,
                                               capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAXBREAK_LAKE", str(home / "lake"))  # export has no --lake: the configured one
    argv = _commands(home, tmp_path)[command]
    assert main(argv("compiled")) == 0, capsys.readouterr().err  # a unique substring
    capsys.readouterr()
    assert main(argv("eager_trace")) == 2  # a stem of two files
    err = capsys.readouterr().err
    assert "'eager_trace' matches 2 traces" in err and f"{EAGER_GZ[:16]} eager_trace.json.gz" in err
    assert f"{EAGER_SQLITE[:16]} eager_trace.sqlite" in err
    for typo in ("zzz", "ffff"):  # a typo, also one that looks like an id prefix: not "run analyze first"
        assert main(argv(typo)) == 2
        err = capsys.readouterr().err
        assert f"no trace matches {typo!r}" in err and "analyze" not in err
    if command in ("summary", "export", "whatif", "requests"):  # the commands of one trace explain the catalogue
        assert main(argv("late_run")) == 2
        err = capsys.readouterr().err
        assert f"trace {LATE[:16]} (late_run.json) is ingested but not analysed" in err
        assert f"`taxbreak analyze --trace {LATE[:16]}`" in err


def test_catalogue_commands_resolve_names_the_same(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", "--trace", "eager_trace", *_paths(home)]) == 2
    err = capsys.readouterr().err
    assert "'eager_trace' matches 2 traces" in err and "eager_trace.sqlite" in err
    assert main(["analyze", "--trace", "zzz", *_paths(home)]) == 2
    assert "no trace matches 'zzz' in the catalogue" in capsys.readouterr().err
    assert main(["forget", "eager_trace", *_paths(home)]) == 2
    err = capsys.readouterr().err
    assert "'eager_trace' matches 2 traces" in err and "--all-matching" in err
    assert main(["forget", "zzz", *_paths(home)]) == 2
    assert "no trace matches 'zzz'" in capsys.readouterr().err
    assert main(["retry", "compiled", "--lake", str(home / "lake")]) == 2  # ingested, so not a failed trace
    assert "no failed trace matches 'compiled'" in capsys.readouterr().err
