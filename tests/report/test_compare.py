"""`taxbreak compare`: the figures equal the warehouse numbers and the synthetic generator's own counts."""

from __future__ import annotations

import json
import re

import duckdb
import pytest

from taxbreak.cli import main
from taxbreak.read.compare import GroupError, compare, format_compare, resolve_group


@pytest.fixture(scope="module")
def con(wh: dict) -> duckdb.DuckDBPyConnection:
    c = duckdb.connect(str(wh["warehouse"]), read_only=True)
    yield c
    c.close()


def _trace_row(con: duckdb.DuckDBPyConnection, trace_id: str) -> dict:
    cur = con.execute("SELECT * FROM taxbreak_by_scope WHERE scope_kind = 'trace' AND trace_id = $t", {"t": trace_id})
    return dict(zip([d[0] for d in cur.description], cur.fetchone(), strict=True))


def test_two_traces_match_the_warehouse(wh: dict, con: duckdb.DuckDBPyConnection) -> None:
    a_id, b_id = wh["ids"]["dense_bs1"], wh["ids"]["moe"]
    res = compare(con, a_id[:10], b_id[:10])
    got = {r["metric"]: r for r in res["rows"]}
    assert res["a"]["trace_ids"] == [a_id] and res["b"]["trace_ids"] == [b_id]
    ra, rb = _trace_row(con, a_id), _trace_row(con, b_id)
    for m in ("t_orchestrate_ns", "delta_ft_ns", "delta_ct_ns", "delta_kt_ns", "t_device_active_ns", "kernels"):
        assert got[m]["a"] == ra[m] and got[m]["b"] == rb[m] and got[m]["delta"] == rb[m] - ra[m]
    assert got["hdbi"]["a"] == pytest.approx(ra["hdbi"], abs=1e-12)
    assert got["hdbi"]["b"] == pytest.approx(rb["hdbi"], abs=1e-12)
    # kernels per token from the generator: every kernel lies in a step, m = output_tokens
    cfg_a, cfg_b = wh["configs"]["dense_bs1"], wh["configs"]["moe"]
    assert got["kernels"]["a"] == wh["kernels"]["dense_bs1"]
    assert got["kpt"]["a"] == wh["kernels"]["dense_bs1"] / cfg_a.output_tokens
    assert got["kpt"]["b"] == wh["kernels"]["moe"] / cfg_b.output_tokens
    il = dict(con.execute("SELECT trace_id, il_ns FROM skip_by_trace").fetchall())
    assert got["end_to_end_ns"]["a"] == il[a_id] and got["end_to_end_ns"]["b"] == il[b_id]
    # ΔKT is N * T_sys: one launch per kernel, default H100 floor 4510 ns
    assert got["delta_kt_ns"]["a"] == wh["kernels"]["dense_bs1"] * 4510


def test_groups_sum_their_traces(wh: dict, con: duckdb.DuckDBPyConnection) -> None:
    dense = [wh["ids"][f"dense_bs{b}"] for b in (1, 4, 16)]
    assert sorted(resolve_group(con, "kind:dense")) == sorted(dense)
    assert sorted(resolve_group(con, "*bs1_*,*bs16*")) == sorted([wh["ids"]["dense_bs1"], wh["ids"]["moe"],
                                                                   wh["ids"]["dense_bs16"]])
    res = compare(con, "kind:dense", "model:synthetic-moe-L2")
    got = {r["metric"]: r for r in res["rows"]}
    rows = [_trace_row(con, t) for t in dense]
    orch = sum(r["t_orchestrate_ns"] for r in rows)
    dev = sum(r["t_device_active_ns"] for r in rows)
    assert got["traces"]["a"] == 3 and got["t_orchestrate_ns"]["a"] == orch
    assert got["hdbi"]["a"] == pytest.approx(dev / (dev + orch), abs=1e-12)
    assert got["kpt"]["a"] == sum(wh["kernels"][f"dense_bs{b}"] for b in (1, 4, 16)) / 12


def test_unknown_group_names_the_item(con: duckdb.DuckDBPyConnection) -> None:
    with pytest.raises(GroupError, match="'model:nope' matches no analysed trace"):
        resolve_group(con, "model:nope")


def test_cli_json(wh: dict, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["compare", "--warehouse", str(wh["warehouse"]), "--json", "bs:1", "bs:16"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    ids = wh["ids"]
    assert sorted(out["a"]["trace_ids"]) == sorted([ids["dense_bs1"], ids["moe"]])  # both batch size 1
    assert out["b"]["trace_ids"] == [ids["dense_bs16"]]
    got = {r["metric"]: r for r in out["rows"]}
    kernels_a = wh["kernels"]["dense_bs1"] + wh["kernels"]["moe"]
    assert (got["traces"]["a"], got["traces"]["b"]) == (2, 1)
    assert (got["kernels"]["a"], got["kernels"]["b"]) == (kernels_a, wh["kernels"]["dense_bs16"])
    assert got["kernels"]["delta"] == wh["kernels"]["dense_bs16"] - kernels_a
    assert (got["delta_kt_ns"]["a"], got["delta_kt_ns"]["b"]) == (kernels_a * 4510, wh["kernels"]["dense_bs16"] * 4510)
    assert main(["compare", "--warehouse", str(wh["warehouse"]), "bs:1", "bs:999"]) == 2
    assert "bs:999" in capsys.readouterr().err


def _cell_spans(line: str) -> list[tuple[int, int]]:
    """(start, end) of each cell of a text table line: runs of text separated by two spaces or more."""
    return [m.span() for m in re.finditer(r"\S+(?: \S+)*", line)]


def test_text_table_columns_line_up(wh: dict, con: duckdb.DuckDBPyConnection) -> None:
    """Every row's A, B and B - A end where their header ends, the flagged_* rows too (issue 29: the metric column
    was 20 wide and flagged_orchestrate_exceeds_wall pushed its row's figures right)."""
    text = format_compare(compare(con, wh["ids"]["dense_bs1"][:10], wh["ids"]["moe"][:10]))
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("metric "))
    table = lines[head:lines.index("", head)]
    assert any(line.startswith("flagged_orchestrate_exceeds_wall ") for line in table)
    spans = [_cell_spans(line) for line in table]
    assert [len(s) >= 4 for s in spans] == [True] * len(spans)
    for col in (1, 2, 3):
        assert {s[col][1] for s in spans} == {spans[0][col][1]}, (col, table)
    assert all(s[0][0] == 0 and s[0][1] + 2 <= s[1][0] for s in spans)


def test_tklqt_is_compared_per_launch_and_said_to_be_a_sum(wh: dict, con: duckdb.DuckDBPyConnection) -> None:
    """TKLQT sums overlapping queue waits, so compare says so and adds its per-launch mean, the figure to compare
    (issue 29: a TKLQT of 1,401 ms beside a 64 ms trace read as a wall time): the group's TKLQT over the launches it
    sums, each trace's mean_launch_to_start_ns for one trace."""
    dense = [wh["ids"][f"dense_bs{b}"] for b in (1, 4, 16)]
    s = {r[0]: r[1:] for r in con.execute("SELECT trace_id, tklqt_ns, launch_samples, negative_samples, "
                                          "mean_launch_to_start_ns FROM skip_by_trace").fetchall()}
    res = compare(con, "kind:dense", wh["ids"]["moe"][:10])
    got = {r["metric"]: r for r in res["rows"]}
    tklqt = sum(s[t][0] for t in dense)
    assert got["tklqt_ns"]["a"] == tklqt
    assert got["tklqt_per_launch_ns"]["a"] == pytest.approx(tklqt / sum(s[t][1] - s[t][2] for t in dense), rel=1e-12)
    assert got["tklqt_per_launch_ns"]["b"] == pytest.approx(s[wh["ids"]["moe"]][3], rel=1e-12)
    assert got["tklqt_per_launch_ns"]["lower_is_better"] is True
    text = format_compare(res)
    assert "tklqt_ns: TKLQT, a sum of overlapping queue waits, so it can exceed the trace's length" in text
    assert any(line.startswith("tklqt_per_launch_ns ") for line in text.splitlines())
