"""`taxbreak export TRACE --format chrome`: a schema check of the Chrome trace-event JSON, and a round trip through
the project's own Kineto adapter (the exported kernels, launches and links come back as they were)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import duckdb
import pytest

from taxbreak.cli import main
from taxbreak.engine.analysis import materialize
from taxbreak.ingest import Lake, ingest_file
from taxbreak.read.export import IDLE_TRACK_TID

# The parts of the Chrome trace-event format (and Perfetto's importer) the export uses.
CHROME_SCHEMA = {
    "type": "object",
    "required": ["traceEvents"],
    "properties": {
        "traceEvents": {"type": "array", "items": {"type": "object", "required": ["ph", "pid", "tid"], "oneOf": [
            {"properties": {"ph": {"const": "X"}, "name": {"type": "string"}, "cat": {"type": "string"},
                            "ts": {"type": "number"}, "dur": {"type": "number", "minimum": 0},
                            "args": {"type": "object"}},
             "required": ["name", "cat", "ts", "dur"]},
            {"properties": {"ph": {"const": "M"}, "name": {"enum": ["process_name", "thread_name",
                                                                     "process_sort_index"]},
                            "args": {"type": "object"}}, "required": ["name", "args"]},
            {"properties": {"ph": {"enum": ["s", "f"]}, "id": {"type": "integer"}, "ts": {"type": "number"},
                            "cat": {"const": "ac2g"}}, "required": ["id", "ts", "cat", "name"]},
        ]}},
        "displayTimeUnit": {"enum": ["ms", "ns"]},
    },
}


def _export(wh: dict, key: str, tmp_path: Path) -> tuple[Path, dict]:
    out = tmp_path / f"{key}.json"
    assert main(["export", wh["ids"][key][:12], "--format", "chrome", "-o", str(out),
                 "--warehouse", str(wh["warehouse"])]) == 0
    return out, json.loads(out.read_text(encoding="utf-8"))


def _kernels(con: duckdb.DuckDBPyConnection, tid: str) -> list[tuple]:
    return con.execute("""
        SELECT kernel_name, kernel_dur_ns, kernel_ts_ns - min(kernel_ts_ns) OVER (), launch_name, stream_id,
               launch_ts_ns - min(kernel_ts_ns) OVER (), is_linked, op_name
        FROM int_kernel_links WHERE trace_id = $t ORDER BY kernel_seq""", {"t": tid}).fetchall()


def test_schema_flows_and_annotations(wh: dict, tmp_path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    _, doc = _export(wh, "dense_bs1", tmp_path)
    jsonschema.validate(doc, CHROME_SCHEMA)
    evs = doc["traceEvents"]
    # numeric process and thread ids stay numbers (Perfetto names int tids; 64-bit or text ids lose their names)
    assert all(isinstance(e["pid"], int) and isinstance(e["tid"], int) and abs(e["tid"]) < 2**31 for e in evs)
    kernels = [e for e in evs if e.get("cat") == "kernel"]
    assert len(kernels) == wh["kernels"]["dense_bs1"]
    starts = {e["id"] for e in evs if e["ph"] == "s"}
    finishes = [e for e in evs if e["ph"] == "f"]
    assert starts == {e["id"] for e in finishes} and len(finishes) == len(kernels)  # one flow per launched kernel
    assert all(e["bp"] == "e" for e in finishes)
    con = duckdb.connect(str(wh["warehouse"]), read_only=True)
    try:
        k1 = con.execute("SELECT kernel_seq, delta_ft_ns, delta_ct_ns, delta_kt_ns, t_launch_obs_ns FROM "
                         "kernel_taxbreak WHERE trace_id = $t ORDER BY kernel_seq LIMIT 1",
                         {"t": wh["ids"]["dense_bs1"]}).fetchone()
        gaps = con.execute("SELECT count(*), sum(gap_ns) FROM device_idle_gaps WHERE trace_id = $t",
                           {"t": wh["ids"]["dense_bs1"]}).fetchone()
    finally:
        con.close()
    first = next(e for e in kernels if e["args"]["taxbreak"]["kernel_seq"] == k1[0])
    tb = first["args"]["taxbreak"]
    assert (tb["delta_ft_ns"], tb["delta_ct_ns"], tb["delta_kt_ns"], tb["t_launch_obs_ns"]) == k1[1:]
    assert tb["t_orchestrate_ns"] == sum(k1[1:4])
    idle = [e for e in evs if e.get("cat") == "taxbreak_idle_gap"]
    assert len(idle) == gaps[0] and all(e["tid"] == IDLE_TRACK_TID for e in idle)
    assert round(sum(e["dur"] for e in idle) * 1000) == gaps[1]


@pytest.mark.parametrize("key", ["dense_bs1", "h100"])
def test_round_trip_through_the_kineto_adapter(wh: dict, tmp_path: Path, key: str) -> None:
    if key not in wh["ids"]:
        pytest.skip("the public traces (../shared/traces/public) are absent")
    out, _ = _export(wh, key, tmp_path)
    gz = tmp_path / f"{key}.pt.trace.json.gz"  # the adapter reads gzip too: the file Perfetto users share
    gz.write_bytes(gzip.compress(out.read_bytes()))
    lake = Lake(tmp_path / "lake")
    res = ingest_file(gz, lake)
    assert res.status == "ingested" and res.row["source_format"] == "kineto", res.error
    materialize(tmp_path / "wh.duckdb", tmp_path / "lake")
    src = duckdb.connect(str(wh["warehouse"]), read_only=True)
    back = duckdb.connect(str(tmp_path / "wh.duckdb"), read_only=True)
    try:
        before, after = _kernels(src, wh["ids"][key]), _kernels(back, res.trace_id)
        # exact to the ns: names, durations, offsets, streams, launches, links and ops come back
        assert after == before
        meta = back.execute("SELECT gpu_name, model FROM trace_meta").fetchone()
        assert meta == src.execute("SELECT gpu_name, model FROM trace_meta WHERE trace_id = $t",
                                   {"t": wh["ids"][key]}).fetchone()
        # the idle-gap slices come back as 'other' events, never as device work: the GPUs ran the same kernels
        q = "SELECT device_id, kernels, kernel_sum_ns FROM device_busy WHERE trace_id = $t ORDER BY device_id"
        assert back.execute(q, {"t": res.trace_id}).fetchall() == src.execute(q, {"t": wh["ids"][key]}).fetchall()
    finally:
        src.close()
        back.close()


def test_unknown_trace_is_a_clear_error(wh: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["export", "deadbeef", "-o", str(tmp_path / "x.json"), "--warehouse", str(wh["warehouse"])]) == 2
    assert "no trace matches 'deadbeef'" in capsys.readouterr().err  # a typo, not "run analyze first"
    assert not (tmp_path / "x.json").exists()
