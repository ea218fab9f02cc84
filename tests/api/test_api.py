"""The Python API (taxbreak.api, docs/api.md) on a vendored real trace: the same figures as the CLI's summary,
DataFrames, the what-if replay, trends, HTML rendering, and `taxbreak summary FILE` (issue 29)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

import taxbreak as tb
from taxbreak.cli import main

ROOT = Path(__file__).resolve().parents[2]
QWEN = ROOT / "tests/data/public/tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
TRITON = ROOT / "tests/data/public/hta/triton_example/triton_example.json.gz"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("api")
    s = tb.analyze_file(QWEN, home)
    assert s.raw["home"] == str(home) and (home / "taxbreak.duckdb").exists()
    return home


def test_import_is_lazy() -> None:
    import subprocess

    code = "import sys, taxbreak; print('taxbreak.api' in sys.modules, 'pandas' in sys.modules); taxbreak.open"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]
    assert {"open", "analyze_file", "Warehouse"} <= set(dir(tb))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        tb.nope  # noqa: B018


def test_summary_is_the_cli_summary(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wh = tb.open(home / "taxbreak.duckdb")
    s = wh.summary("Qwen")
    assert main(["summary", "Qwen", "--json", "--warehouse", str(home / "taxbreak.duckdb"),
                 "--lake", str(home / "lake")]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert s.trace_id == cli["headline"]["trace_id"] and s.file_name == QWEN.name
    for k in ("hdbi", "hdbi_wall", "t_orchestrate_ns", "delta_ft_ns", "kernels", "t_sys_ns"):
        assert s.headline[k] == cli["headline"][k], k
    assert s.verdict["bound"] == cli["verdict"]["bound"] == "device-bound"
    assert isinstance(s.kernels, pd.DataFrame) and len(s.kernels) == 5
    assert list(s.kernels.kernel_name) == [k["kernel_name"] for k in cli["top_kernels_by_time"]]
    assert s.ops.scope_kind.eq("op").all() and s.ops.t_orchestrate_ns.is_monotonic_decreasing
    assert [c["kind"] for c in s.caveats] == [c["kind"] for c in cli["caveats"]]
    assert s.text().splitlines()[1].lstrip().startswith("VERDICT  DEVICE-BOUND")
    html = s._repr_html_()
    assert html.startswith(f"<h4>{QWEN.name} ") and "VERDICT  DEVICE-BOUND" in html and "<table" in html
    # TKLQT (1,401 ms on this 64 ms trace) is said to be a sum of overlapping waits, with its per-launch mean
    assert ("tklqt_ns: TKLQT, mean 1.36 ms per launch over 1,029 launches; a sum of overlapping queue waits, so "
            "it can exceed the trace&#x27;s length") in html


def test_sql_traces_trend_and_whatif(home: Path) -> None:
    wh = tb.open(home / "taxbreak.duckdb")
    n = wh.sql("SELECT count(*) AS n FROM kernel_taxbreak")
    assert isinstance(n, pd.DataFrame) and int(n.n[0]) == wh.summary("Qwen").headline["kernels"]
    assert wh.sql("SELECT 1 AS x", arrow=True).column("x").to_pylist() == [1]
    from taxbreak.store.query import SandboxRefused

    with pytest.raises(SandboxRefused):  # the sandbox of `taxbreak sql`: a reader writes nothing
        wh.sql(f"COPY (SELECT 1) TO '{home / 'lake' / 'x.parquet'}'")
    assert not (home / "lake" / "x.parquet").exists()
    cat = wh.traces()
    assert list(cat.file_name) == [QWEN.name] and list(cat.status) == ["ingested"]
    assert list(wh.trend().runs) == [1] and len(wh.trend("Qwen")) == 1
    same = wh.whatif("Qwen")  # the identity replay
    assert abs(same.il_ratio - 1) < 0.02
    faster = wh.whatif("Qwen", host_speedup=2.0)
    assert faster.il_ratio < same.il_ratio and faster.scenario["host_speedup"] == 2.0
    assert {"own_il_ns", "replay_il_ns"} <= set(faster.scopes.columns)
    with pytest.raises(TypeError):
        wh.whatif("Qwen", warp_speed=9)


def test_traces_lists_what_taxbreak_traces_lists(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`wh.traces()` leaves out files that are no trace at all as `taxbreak traces` does, and `all=True` lists them as
    `--all` does (issue 29: the API listed a stray config.json that the CLI hid); a failed trace is always listed."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "a_config.json").write_text('{"model": "llama", "batch_size": 4}')  # JSON without traceEvents
    (inbox / "b_cut.json").write_text('{"traceEvents": [{"ph": "X", ')  # a truncated trace: failed
    where = ["--lake", str(tmp_path / "lake"), "--warehouse", str(tmp_path / "wh.duckdb")]
    assert main(["ingest", str(TRITON), *where]) == 0
    assert main(["ingest", str(inbox), *where]) == 1
    capsys.readouterr()
    wh = tb.open(tmp_path / "wh.duckdb", lake=tmp_path / "lake")
    for extra, statuses in (([], ["ingested", "failed"]), (["--all"], ["ingested", "failed", "not_a_trace"])):
        assert main(["traces", "--json", *extra, *where]) == 0
        cli = json.loads(capsys.readouterr().out)
        api = wh.traces(all=bool(extra))
        assert sorted(api.status) == sorted(statuses) and sorted(r["status"] for r in cli) == sorted(statuses)
        assert list(api.trace_id) == [r["trace_id"] for r in cli]  # the same rows in the same order
        assert wh.traces(all=bool(extra), arrow=True).column("trace_id").to_pylist() == list(api.trace_id)
    assert "a_config.json" not in set(wh.traces().file_name) and "b_cut.json" in set(wh.traces().file_name)


def test_analyze_file_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "broken.json"
    bad.write_text('{"traceEvents": [{"ph": "X", ', encoding="utf-8")
    with pytest.raises(ValueError, match=r"broken\.json: not ingested"):
        tb.analyze_file(bad, tmp_path / "home")


def test_summary_of_a_file_not_yet_analysed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    where = ["--lake", str(tmp_path / "lake"), "--warehouse", str(tmp_path / "wh.duckdb")]
    assert main(["summary", str(TRITON), "--json", *where]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["headline"]["file_name"] == TRITON.name  # stdout: only the summary
    assert f"was not analysed yet: ingested into {tmp_path / 'lake'} and analysed into" in out.err
    assert main(["summary", str(TRITON), *where]) == 0  # the second time: read, nothing redone
    out = capsys.readouterr()
    assert "was not analysed yet" not in out.err and "VERDICT  NOT ENOUGH EVIDENCE" in out.out
    # a file that is no trace: one line naming it once and the problem (it said "(see above)" over nothing above,
    # and named the file twice)
    notes = tmp_path / "notes.md"
    notes.write_text("# my notes\n")
    assert main(["summary", str(notes), *where]) == 2
    assert capsys.readouterr().err == (f"summary: {notes}: not a trace file taxbreak reads (unrecognised format "
                                       "(expected Kineto JSON, Nsight SQLite or .nsys-rep))\n")


def test_example_notebook_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/examples/quickstart.ipynb, its code cells run in order in one namespace from the repository root (as
    Jupyter would; nbclient is not a dependency), each cell's last expression kept as its result."""
    import ast

    nb = json.loads((ROOT / "docs/examples/quickstart.ipynb").read_text(encoding="utf-8"))
    assert nb["nbformat"] == 4
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))  # analyze_file's folder under the test's tmp
    ns: dict = {}
    results = []
    for cell in (c for c in nb["cells"] if c["cell_type"] == "code"):
        tree = ast.parse("".join(cell["source"]))
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, "<cell>", "exec"), ns)  # noqa: S102 - the repository's own notebook
        results.append(eval(compile(ast.Expression(last.value), "<cell>", "eval"), ns) if last else None)  # noqa: S307
    summary, verdict, kernels, ops, scopes, ratio, workloads = results
    assert "VERDICT  DEVICE-BOUND" in summary._repr_html_()
    assert verdict[0] == "device-bound"
    assert list(kernels.columns) == ["kernel_name", "total_dur_ns", "invocations"] and len(kernels) == 5
    assert ops.t_orchestrate_ns.iloc[0] >= ops.t_orchestrate_ns.iloc[-1]
    assert {"trace", "step", "op", "kernel"} <= set(scopes.scope_kind)
    assert 0.5 < ratio < 1.0 and len(workloads) == 1
