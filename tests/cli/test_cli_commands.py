"""Issue 15's command-line items and issue 13's `sql` sandbox and terminal escapes, each on hand-built traces
(tests/sql/scenarios.py: the mixed trace has 6 charged launch calls on an H100, so ΔKT = 6 × T_sys)."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from cli_support import FUSION_ID, MIXED_ID, Run, add_fusion

from taxbreak import __version__
from taxbreak.cli import main
from taxbreak.ingest import Lake

GOOD_KINETO = (
    b'{"schemaVersion": 1, "traceEvents": [\n'
    b'{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7, "ts": 10.5, "dur": 2.25},\n'
    b'{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 7, "ts": 11, "dur": 1,'
    b' "args": {"correlation": 3}},\n'
    b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 13, "dur": 4,'
    b' "args": {"device": 0, "stream": 7, "correlation": 3}}\n], "traceName": "good"}')


def _paths(home: Path) -> list[str]:
    return ["--lake", str(home / "lake"), "--warehouse", str(home / "taxbreak.duckdb")]


def _one(db: Path, sql: str) -> tuple:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchone()
    finally:
        con.close()


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"taxbreak {__version__}"


def test_a_reader_that_leaves_ends_the_command_quietly(home: Path, run: Run) -> None:
    inbox = home / "inbox"
    inbox.mkdir()
    (inbox / "good.json").write_bytes(GOOD_KINETO)
    assert run("analyze", "-q").returncode == 0
    for args in (["traces", "--json"], ["summary", "mixed.json"], ["analyze"], ["ingest", str(inbox)],
                 ["sql", "SELECT * FROM trace_meta"]):
        r, w = os.pipe()
        os.close(r)  # `| head` that has already left
        try:
            proc = run(*args, stdout=w)
        finally:
            os.close(w)
        assert proc.returncode == 141, (args, proc.returncode, proc.stderr)
        assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, (args, proc.stderr)


def test_bad_table_and_unknown_traces_are_clear(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", "--table", "nosuch", *_paths(home)]) == 2
    err = capsys.readouterr().err
    assert "unknown table(s): nosuch; known: " in err and "kernel_taxbreak" in err
    assert not (home / "taxbreak.duckdb").exists()  # refused before anything was opened
    assert main(["analyze", "--trace", "deadbeef", *_paths(home)]) == 2
    assert f"no trace matches 'deadbeef' in the catalogue at {home / 'lake'}" in capsys.readouterr().err
    add_fusion(home / "lake")
    assert main(["analyze", "-q", "--trace", "mixed.json", *_paths(home)]) == 0
    capsys.readouterr()
    assert main(["summary", "deadbeef", *_paths(home)]) == 2  # never ingested: not "run analyze first"
    err = capsys.readouterr().err
    assert "no trace matches 'deadbeef': it is in neither the warehouse" in err and "analyze" not in err
    assert main(["summary", FUSION_ID[:10], *_paths(home)]) == 2  # ingested, not analysed
    assert (f"trace {FUSION_ID[:16]} (fusion.json) is ingested but not analysed in "
            f"{home / 'exports' / 'snapshot.duckdb'}: run `taxbreak analyze --trace {FUSION_ID[:16]}`"
            ) in capsys.readouterr().err


def test_traces_names_the_lake_it_read(tmp_path: Path, run: Run) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = run("traces", cwd=elsewhere, env={"TAXBREAK_HOME": ""})
    assert proc.returncode == 0
    assert "the catalogue at warehouse/lake is empty (that lake path comes from the default" in proc.stdout


def test_json_outputs_are_json_once(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inbox = home / "inbox"
    inbox.mkdir()
    (inbox / "good.json").write_bytes(GOOD_KINETO)
    assert main(["ingest", "--json", str(inbox), *_paths(home)]) == 0
    ingest = json.loads(capsys.readouterr().out)
    assert [(f["status"], f["catalogue"]["event_count"]) for f in ingest["files"]] == [("ingested", 3)]
    assert ingest["files"][0]["catalogue"]["event_counts"] == {"framework_op": 1, "kernel": 1, "runtime_api": 1}
    assert main(["traces", "--json", *_paths(home)]) == 0
    rows = {r["file_name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["good.json"]["event_counts"] == {"framework_op": 1, "kernel": 1, "runtime_api": 1}  # not a string
    assert rows["mixed.json"]["gpu_names"] == ["NVIDIA H100 80GB HBM3"]
    assert rows["mixed.json"]["metadata"]["taxbreak"]["batch_size"] == 1
    assert main(["analyze", "--json", *_paths(home)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["scope"] == "all traces" and out["tables"]["trace_meta"] == 2 and out["t_sys_override_ns"] is None
    assert main(["sql", "--format", "json", "SELECT trace_id, kernels, hdbi IS NULL AS no_hdbi FROM taxbreak_by_scope "
                 "WHERE scope_kind = 'trace' ORDER BY kernels", *_paths(home)]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [(r["kernels"], r["no_hdbi"]) for r in got] == [(1, False), (9, False)]
    assert got[1]["trace_id"] == MIXED_ID


def test_quiet_and_verbose(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", "-q", *_paths(home)]) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.startswith("analysed all traces") and "int_kernel_links" not in out
    assert main(["-v", "analyze", *_paths(home)]) == 0  # before or after the subcommand
    out, err = capsys.readouterr()
    line = next(x for x in out.splitlines() if x.strip().startswith("int_kernel_links"))
    assert line.rstrip().endswith(" s") and "analysing all traces" in err
    assert main(["analyze", "-q", "-v", *_paths(home)]) == 2


def test_progress_only_on_a_terminal(home: Path, run: Run) -> None:
    inbox = home / "inbox"
    inbox.mkdir()
    (inbox / "good.json").write_bytes(GOOD_KINETO)
    proc = run("ingest", str(inbox))
    assert proc.returncode == 0 and "\r" not in proc.stderr and "\r" not in proc.stdout
    proc = run("analyze")
    assert proc.returncode == 0 and "\r" not in proc.stderr
    assert "int_kernel_links" in proc.stdout  # each table's line as it is done, not all at the end

    # on a terminal: one bar per phase (read, parse, write), drawn by tqdm on stderr
    (inbox / "good2.json").write_bytes(GOOD_KINETO.replace(b'"good"', b'"good2"'))
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAXBREAK_")} | {"TAXBREAK_HOME": str(home)}
    p = subprocess.Popen([sys.executable, "-m", "taxbreak.cli", "ingest", str(inbox / "good2.json")], cwd=home,
                         env=env, stdout=subprocess.PIPE, stderr=slave, text=False)
    os.close(slave)
    seen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the process closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    p.communicate(timeout=60)
    os.close(master)
    assert p.returncode == 0
    for phase in (b"good2.json read", b"good2.json parse", b"good2.json write"):
        assert phase in seen, seen
    assert b"\r" in seen


def _evil_lake(home: Path) -> None:
    from sql.scenarios import ev, kernel, write_trace

    t = "e" * 64
    rows = [ev(t, "runtime_api", "cudaLaunchKernel", 100, 50, "1", "1", correlation_id=1),
            kernel(t, "gemm\x1b]0;pwned\x07\x1b[2J", 300, 100, "1", 1)]
    write_trace(Lake(home / "lake"), t, rows, gpu="NVIDIA H100 80GB HBM3", file_name="evil\x1b[31m.json")


def test_escape_sequences_in_names_are_neutralised(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _evil_lake(home)
    assert main(["analyze", "-q", *_paths(home)]) == 0
    capsys.readouterr()
    assert main(["traces", *_paths(home)]) == 0
    assert main(["summary", "e" * 12, *_paths(home)]) == 0
    assert main(["sql", "SELECT kernel_name FROM skip_by_kernel WHERE kernel_name LIKE 'gemm%'", *_paths(home)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "evil\\x1b[31m.json" in out and "gemm\\x1b]0;pwned\\x07\\x1b[2J" in out
    # JSON keeps the exact name, escaped by JSON itself
    assert main(["summary", "--json", "e" * 12, *_paths(home)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and '"evil\\u001b[31m.json"' in out


def test_sql_is_sandboxed_unless_lifted(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", "-q", *_paths(home)]) == 0
    capsys.readouterr()
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n42\n")
    outside = tmp_path / "out.csv"
    for query in (f"SELECT * FROM read_csv('{secret}')", f"COPY (SELECT 1) TO '{outside}'",
                  f"ATTACH '{tmp_path / 'x.duckdb'}' AS x", "SET enable_external_access = true"):
        assert main(["sql", query, *_paths(home)]) == 1, query
        err = capsys.readouterr().err
        assert "taxbreak sql:" in err
    assert not outside.exists() and not (tmp_path / "x.duckdb").exists()
    assert main(["sql", f"SELECT * FROM '{secret}'", *_paths(home)]) == 1
    assert "reads only the warehouse, lake and exports; --unrestricted lifts that" in capsys.readouterr().err
    # the warehouse and the lake stay readable
    assert main(["sql", "--format", "csv", "SELECT count(*) AS n FROM events WHERE kind = 'kernel'",
                 *_paths(home)]) == 0
    assert capsys.readouterr().out.split() == ["n", "9"]  # the 9 kernels of the mixed trace
    assert main(["sql", "--unrestricted", "--format", "csv", f"SELECT a FROM read_csv('{secret}')",
                 *_paths(home)]) == 0
    assert capsys.readouterr().out.split() == ["a", "42"]
    out_pq = tmp_path / "r.parquet"  # -o is written by taxbreak itself, so it may go anywhere
    assert main(["sql", "--format", "parquet", "-o", str(out_pq), "SELECT 7 AS x", *_paths(home)]) == 0
    assert duckdb.sql(f"SELECT x FROM '{out_pq}'").fetchall() == [(7,)]


def test_forget_removes_a_trace_everywhere(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    add_fusion(home / "lake")
    assert main(["analyze", "-q", *_paths(home)]) == 0
    db = home / "taxbreak.duckdb"
    kept_fusion = _one(db, f"SELECT count(*) FROM kernel_taxbreak WHERE trace_id = '{FUSION_ID}'")[0]
    assert kept_fusion == 10
    capsys.readouterr()
    assert main(["forget", "fusion.json", *_paths(home)]) == 0
    out = capsys.readouterr().out
    assert f"forgot {FUSION_ID[:16]}  fusion.json" in out
    con = duckdb.connect(str(db), read_only=True)
    try:
        tables = [r[0] for r in con.execute("SELECT DISTINCT table_name FROM duckdb_columns() "
                                            "WHERE column_name = 'trace_id'").fetchall()]
        for t in tables:
            assert con.execute(f'SELECT count(*) FROM "{t}" WHERE trace_id = $t', {"t": FUSION_ID}).fetchone() == (
                0,), t
        assert con.execute("SELECT count(*) FROM kernel_taxbreak WHERE trace_id = $t", {"t": MIXED_ID}).fetchone(
            ) == (9,)
    finally:
        con.close()
    assert [r["trace_id"] for r in Lake(home / "lake").catalogue().to_pylist()] == [MIXED_ID]
    assert not (home / "lake" / "events" / f"trace_id={FUSION_ID}").exists()
    assert _one(home / "exports" / "snapshot.duckdb", "SELECT count(*) FROM trace_meta") == (1,)
    assert main(["forget", "fusion.json", *_paths(home)]) == 2
    assert "no trace matches 'fusion.json' in the catalogue" in capsys.readouterr().err


def _t_sys(home: Path) -> tuple:
    return _one(home / "taxbreak.duckdb", "SELECT f.t_sys_ns, f.t_sys_source, f.t_sys_rule, f.t_sys_is_default, "
                "t.delta_kt_ns FROM trace_launch_floor f JOIN taxbreak_by_scope t USING (trace_id) "
                f"WHERE t.scope_kind = 'trace' AND trace_id = '{MIXED_ID}'")


def test_t_sys_set_by_the_user(home: Path, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(home)
    monkeypatch.delenv("TAXBREAK_T_SYS_NS", raising=False)
    monkeypatch.delenv("TAXBREAK_CONFIG", raising=False)
    assert main(["analyze", "-q", *_paths(home)]) == 0
    assert _t_sys(home) == (4510, "default", "default_h100", True, 6 * 4510)
    assert main(["analyze", "-q", "--t-sys-ns", "5000", *_paths(home)]) == 0
    assert _t_sys(home) == (5000, "user_setting", "user_setting", False, 6 * 5000)
    capsys.readouterr()
    assert main(["summary", "mixed.json", *_paths(home)]) == 0
    assert "T_sys 5.00 µs (user_setting, user_setting)" in capsys.readouterr().out
    (home / "taxbreak.toml").write_text("[analysis]\nt_sys_ns = 4000\n")
    assert main(["analyze", "-q", *_paths(home)]) == 0
    assert _t_sys(home)[0::4] == (4000, 6 * 4000)
    monkeypatch.setenv("TAXBREAK_T_SYS_NS", "4200")  # the environment before the file
    assert main(["analyze", "-q", *_paths(home)]) == 0
    assert _t_sys(home)[0::4] == (4200, 6 * 4200)
    monkeypatch.setenv("TAXBREAK_T_SYS_NS", "fast")
    assert main(["analyze", "-q", *_paths(home)]) == 2
    assert "$TAXBREAK_T_SYS_NS: analysis.t_sys_ns must be int, got 'fast'" in capsys.readouterr().err


def test_taxbreak_toml_is_found_from_a_subfolder(home: Path, run: Run) -> None:
    project = home / "project"
    (project / "deep" / "er").mkdir(parents=True)
    (project / "taxbreak.toml").write_text('[paths]\nlake = "../lake"\nwarehouse = "out/wh.duckdb"\n')
    proc = run("traces", cwd=project / "deep" / "er", env={"TAXBREAK_HOME": ""})
    assert proc.returncode == 0 and "mixed.json" in proc.stdout, proc.stderr
    proc = run("analyze", "-q", cwd=project / "deep" / "er", env={"TAXBREAK_HOME": ""})
    assert proc.returncode == 0 and (project / "out" / "wh.duckdb").exists(), proc.stderr
    # the environment wins over the file
    proc = run("traces", cwd=project, env={"TAXBREAK_LAKE": str(home / "nolake"), "TAXBREAK_HOME": ""})
    assert f"the catalogue at {home / 'nolake'} is empty (that lake path comes from $TAXBREAK_LAKE" in proc.stdout
    (project / "taxbreak.toml").write_text("[paths]\nlakes = 'x'\n")
    proc = run("traces", cwd=project, env={"TAXBREAK_HOME": ""})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{project / 'taxbreak.toml'}: unknown setting 'paths.lakes'" in proc.stderr


def test_traces_leaves_out_files_that_are_not_traces(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A stray config.json in an ingested folder is recorded (ingesting the folder again skips it) but `traces` lists
    it only with --all, counting it otherwise; a failed trace is always listed; the columns line up whatever the
    status (issue 29: not_a_trace was wider than the status column, and stayed listed forever)."""
    inbox = home / "inbox"
    inbox.mkdir()
    (inbox / "good.json").write_bytes(GOOD_KINETO)
    (inbox / "config.json").write_text('{"model": "llama", "batch_size": 4}')
    (inbox / "cut.json").write_bytes(GOOD_KINETO[:40])  # a truncated trace: failed
    assert main(["ingest", str(inbox), *_paths(home)]) == 1
    capsys.readouterr()
    assert main(["ingest", str(inbox), *_paths(home)]) == 1  # the folder again: config.json told, not listed
    assert "IGNORED (not a trace)" in capsys.readouterr().err
    assert main(["traces", *_paths(home)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert not any("config.json" in line for line in out)
    assert any("cut.json" in line and " failed " in line for line in out)
    assert out[-1] == "(1 file that is not a trace (not_a_trace) left out: `taxbreak traces --all` lists it)"
    assert main(["traces", "--json", *_paths(home)]) == 0
    assert "not_a_trace" not in {r["status"] for r in json.loads(capsys.readouterr().out)}
    assert main(["traces", "--all", *_paths(home)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert "left out" not in "\n".join(table)
    row = next(line for line in table if "config.json" in line)
    assert " not_a_trace " in row and "without traceEvents" in row
    head = table[0]
    cols = ["status", "format", "events", "GPUs", "file / error"]
    starts = {c: head.index(c) for c in ("status", "format", "file / error")}  # left-aligned: start together
    ends = {c: head.index(c) + len(c) for c in ("events", "GPUs")}  # right-aligned: end together
    assert all(c in head for c in cols) and len(table) == 5  # header, mixed.json, good, cut, config
    for line in table[1:]:
        assert line[starts["status"] - 2:starts["status"]] == "  " and line[starts["status"]] != " "
        assert line[starts["format"] - 2:starts["format"]] == "  " and line[starts["format"]] != " "
        assert line[ends["events"] - 1] != " " and line[ends["events"]] == " "
        assert line[ends["GPUs"] - 1] != " " and line[ends["GPUs"]:ends["GPUs"] + 2] == "  "
        assert line[starts["file / error"] - 2:starts["file / error"]] == "  " and line[starts["file / error"]] != " "
    assert main(["traces", "--all", "--json", *_paths(home)]) == 0
    assert sorted(r["status"] for r in json.loads(capsys.readouterr().out)) == ["failed", "ingested", "ingested",
                                                                                 "not_a_trace"]
