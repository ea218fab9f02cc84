"""Request lists at real sizes (issue 26): <trace>.requests.jsonl[.gz] beside a trace is read at ingest into the lake
(DuckDB NDJSON -> Parquet, never the whole list in memory), read by the analysis in place of the sidecar's lists,
and a refused one is a recorded error that `taxbreak traces`, `taxbreak ingest` and the report show."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import duckdb
import pytest

from taxbreak.capture.synthetic_serving import ServingConfig, simulate_serving, write_serving_kineto
from taxbreak.cli import main
from taxbreak.engine import analysis
from taxbreak.ingest import Lake, ingest_file
from taxbreak.ingest.request_lists import REQUESTS_ERROR_KEY, REQUESTS_KEY, RequestListError, convert
from taxbreak.read import readmodel


def _lines(*objs: object) -> str:
    return "".join(json.dumps(o) + "\n" for o in objs)


def test_convert_reads_steps_and_requests(tmp_path: Path) -> None:
    src = tmp_path / "t.json.requests.jsonl"
    src.write_text(_lines(
        {"step": "s1", "requests": [{"request_id": "a", "phase": "prefill", "tokens": 10, "context_tokens": 0},
                                    {"request_id": "b", "tenant": "x", "phase": "decode", "tokens": 1,
                                     "context_tokens": 30, "output_tokens": 1}]},
        {"step": "s2", "requests": []},  # an idle step: kept as a step, no request row
        {"step": "s3", "requests": [{"request_id": "a", "phase": "decode", "tokens": 1, "context_tokens": 10,
                                     "extra": "ignored"}]}))
    info = convert(src, tmp_path / "out.parquet", "t.json.requests.jsonl")
    assert (info["steps"], info["rows"], info["bytes"]) == (3, 3, src.stat().st_size)
    rows = duckdb.connect().execute(f"SELECT * FROM '{tmp_path / 'out.parquet'}' ORDER BY step_name, "
                                    "request_index").fetchall()
    assert rows == [("s1", 0, "a", None, "prefill", 10, 0, None), ("s1", 1, "b", "x", "decode", 1, 30, 1),
                    ("s2", None, None, None, None, None, None, None), ("s3", 0, "a", None, "decode", 1, 10, None)]


@pytest.mark.parametrize(("text", "message"), [
    ('{"step": "s", "requests": [{"request_id": "a", "phase": "verify", "tokens": 1, "context_tokens": 0}]}',
     "phase must be 'prefill' or 'decode' (step 's', 1 row(s))"),
    ('{"step": "s", "requests": [{"request_id": "a", "phase": "decode", "tokens": -1, "context_tokens": 0}]}',
     "tokens must be a non-negative integer"),
    ('{"step": "s", "requests": [{"phase": "decode", "tokens": 1, "context_tokens": 0}]}',
     "a request without request_id"),
    ('{"requests": []}', "a line without its 'step' name"),
    ('{"step": "s", "requests": [{"request_id": "a", "phase": "decode", "tokens": "x", "context_tokens": 0}]}',
     "not a request list (one JSON object per line, docs/sidecar.md): "),
    ('{"step": "s", "requests": []}\n{"step": "s", "requests": []}', "step 's' appears on more than one line"),
    ('{"step": "s", "requests": [{"request_id": "a", "phase": "decode", "tokens": 1, "context_tokens": 0}, '
     '{"request_id": "a", "phase": "decode", "tokens": 1, "context_tokens": 0}]}', "request 'a' appears twice"),
    ("", "no steps (an empty request list)"),
])
def test_a_bad_list_is_refused_in_one_line_naming_the_file(tmp_path: Path, text: str, message: str) -> None:
    src = tmp_path / "t.json.requests.jsonl.gz"
    src.write_bytes(gzip.compress(text.encode()))
    dest = tmp_path / "out.parquet"
    with pytest.raises(RequestListError) as exc:
        convert(src, dest, "bucket/t.json.requests.jsonl.gz")
    assert str(exc.value).startswith("bucket/t.json.requests.jsonl.gz: " + message)
    assert "\n" not in str(exc.value) and str(src) not in str(exc.value) and not dest.exists()


def _trace_with_list(tmp_path: Path, n_requests: int = 120) -> tuple[Path, object, dict]:
    """A chunked-prefill trace whose request lists live in <trace>.requests.jsonl.gz, not in the sidecar."""
    run = simulate_serving(ServingConfig(n_requests=n_requests, policy="chunked", seed=4, arrivals_per_step=0.3))
    path = write_serving_kineto(run, tmp_path / "in" / "served.json.gz")
    side = path.with_name(path.name + ".meta.json")
    meta = json.loads(side.read_text())
    lists = path.with_name(path.name + ".requests.jsonl.gz")
    with gzip.open(lists, "wt") as fh:
        for st in meta["steps"]:
            fh.write(json.dumps({"step": st["name"], "requests": st.pop("requests")}) + "\n")
    side.write_text(json.dumps(meta))
    return path, run, meta


def test_a_list_beside_the_trace_is_ingested_and_attributed(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path, run, _ = _trace_with_list(tmp_path)
    lake = Lake(tmp_path / "lake")
    res = ingest_file(path, lake)
    assert res.status == "ingested"
    rec = json.loads(res.row["metadata_json"])[REQUESTS_KEY]
    n_req = sum(len(b) for b in run.steps)
    assert (rec["steps"], rec["rows"]) == (len(run.steps), n_req) and lake.has_requests(res.trace_id)
    again = ingest_file(path, lake)  # the same list: not converted again
    assert again.status == "unchanged" and json.loads(again.row["metadata_json"])[REQUESTS_KEY] == rec
    wh = tmp_path / "wh.duckdb"
    analysis.materialize(wh, lake.root)
    con = duckdb.connect(str(wh), read_only=True)
    steps = con.execute("SELECT phase, count(*), sum(batch_requests), bool_and(has_request_detail) FROM serving_steps "
                        "GROUP BY ALL ORDER BY phase").fetchall()
    want = {ph: (sum(p == ph for p in run.phases), sum(len(b) for b, p in zip(run.steps, run.phases, strict=True)
                                                       if p == ph)) for ph in set(run.phases)}
    assert steps == [(ph, *want[ph], True) for ph in sorted(want)]
    assert con.execute("SELECT count(*), sum(tokens) FROM serving_step_requests").fetchone() == (
        n_req, sum(e["tokens"] for b in run.steps for e in b))
    con.close()
    assert main(["requests", "--refit", "--warehouse", str(wh)]) == 0
    assert main(["requests", "served", "--warehouse", str(wh), "--json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["request_count"] == run.cfg.n_requests


def test_a_refused_list_is_a_visible_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path, _, _ = _trace_with_list(tmp_path, n_requests=20)
    lists = path.with_name(path.name + ".requests.jsonl.gz")
    good = lists.read_bytes()
    lists.write_bytes(gzip.compress(b'{"step": "serve_step#1", "requests": [{"request_id": "a", "phase": "x", '
                                    b'"tokens": 1, "context_tokens": 0}]}\n'))
    lake = Lake(tmp_path / "lake")
    assert main(["ingest", str(path), "--lake", str(lake.root)]) == 0  # the trace itself is fine
    err = capsys.readouterr().err
    line = f"WARNING request list refused: {lists}: phase must be 'prefill' or 'decode' (step 'serve_step#1'"
    assert line in err
    assert main(["traces", "--lake", str(lake.root)]) == 0
    assert f"served.json.gz; request list refused: {lists}: phase must be" in capsys.readouterr().out
    trace_id = lake.catalogue().to_pylist()[0]["trace_id"]
    assert not lake.has_requests(trace_id)
    wh = tmp_path / "wh.duckdb"
    analysis.materialize(wh, lake.root)
    con = duckdb.connect(str(wh), read_only=True)
    (h,) = readmodel.trace_headlines(con, [trace_id])
    errors = con.execute("SELECT side_file_errors FROM trace_meta").fetchone()[0]
    con.close()
    assert errors.startswith(f"request list refused: {lists}: phase must be")
    assert {"kind": "side_files", "text": errors} in readmodel.caveats(h)  # the summary's and the report's caveats
    # fixed: the next ingest of the same trace converts it, and the error goes
    lists.write_bytes(good)
    res = ingest_file(path, lake)
    meta = json.loads(res.row["metadata_json"])
    assert res.status == "unchanged" and REQUESTS_ERROR_KEY not in meta and meta[REQUESTS_KEY]["steps"] > 0
    assert lake.has_requests(trace_id)
    assert main(["forget", trace_id[:16], "--lake", str(lake.root), "--warehouse", str(wh)]) == 0
    assert not lake.has_requests(trace_id)
