"""The Kineto events array read in pieces (DuckDB reads one JSON array file on one thread; pieces go to its
threads in parallel): the pieces are the array's elements, in order, and the stored rows are those of a read
in one piece, also when a cut falls inside an element (an args array of objects, a string holding ``},{``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from taxbreak.ingest import Lake, ingest_file
from taxbreak.ingest import kineto as kineto_mod

HOST = 4242


def _events(n: int, traps: bool = True) -> list[dict]:
    """n launches with their kernels; with ``traps``, every kernel has an args array of objects and every 7th
    launch a name holding '}, {' (the bytes a cut looks for, inside an element)."""
    out: list[dict] = [{"name": "process_name", "ph": "M", "ts": 1, "pid": HOST, "tid": 0, "args": {"name": "py"}}]
    for i in range(n):
        name = 'odd"}, {"name' if traps and i % 7 == 0 else "cudaLaunchKernel"
        out.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": HOST, "tid": HOST, "ts": 100 + 10 * i,
                    "dur": 2, "args": {"correlation": i}})
        args = {"device": 0, "stream": 7, "correlation": i}
        if traps:
            args["parts"] = [{"a": i}, {"b": [i, {"c": 1}]}]
        out.append({"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": 104 + 10 * i, "dur": 5,
                    "args": args})
    return out


def _rows(lake: Lake, path: Path) -> tuple[list[dict], dict]:
    res = ingest_file(path, lake)
    assert res.status == "ingested", res.error
    return lake.read_events(res.trace_id).to_pylist(), res.row


@pytest.fixture
def stage_calls(monkeypatch):
    """The number of piece files of each JSON pass (1: one file, or the NDJSON fallback)."""
    calls: list[int] = []
    real = kineto_mod._stage

    def spy(con, events_path, fmt, stage_path, max_json_depth):  # noqa: ANN001, ANN202
        calls.append(len(events_path) if isinstance(events_path, list) else 1)
        return real(con, events_path, fmt, stage_path, max_json_depth)

    monkeypatch.setattr(kineto_mod, "_stage", spy)
    return calls


def test_piece_ranges_cut_between_elements():
    """Cuts at '}' ',' '{' only: each piece, closed with brackets, parses; together they are the elements."""
    elements = [{"i": i, "s": "x" * (i % 5)} for i in range(40)]
    text = ("[\n" + ",\n".join(json.dumps(e) for e in elements) + "\n]").encode()
    path_bytes = b'{"traceEvents": ' + text + b"}"
    lo, hi = 16, 16 + len(text)

    import io

    fh = io.BytesIO(path_bytes)
    ranges = kineto_mod._piece_ranges(fh, lo, hi, 100)
    assert ranges[0][0] == lo and ranges[-1][1] == hi
    assert all(a < b for a, b in ranges) and all(b <= c for (_, b), (c, _) in zip(ranges, ranges[1:], strict=False))
    assert len(ranges) > 5
    got = []
    for i, (a, b) in enumerate(ranges):
        piece = path_bytes[a:b]
        assert piece.endswith(b"}") or i == len(ranges) - 1
        assert piece.startswith(b"{") or i == 0
        got += json.loads((b"" if i == 0 else b"[") + piece + (b"" if i == len(ranges) - 1 else b"]"))
        assert path_bytes[b:ranges[i + 1][0]].strip() == b"," if i + 1 < len(ranges) else True
    assert got == elements


@pytest.mark.parametrize("gz", [False, True], ids=["json", "json.gz"])
def test_pieces_store_the_rows_of_one_piece(write_kineto, tmp_path, monkeypatch, stage_calls, gz):
    events = _events(300, traps=False)  # no cut can fall inside an element: the one-file retry is never needed
    path = write_kineto("t.json.gz" if gz else "t.json", events, trailer={"traceName": "t"}, gz=gz)
    whole, whole_row = _rows(Lake(tmp_path / "one"), path)
    assert stage_calls == [1]
    monkeypatch.setattr(kineto_mod, "PIECE_MIN_BYTES", 1)
    monkeypatch.setattr(kineto_mod, "PIECE_BYTES", 2000)
    pieces, pieces_row = _rows(Lake(tmp_path / "pieces"), path)
    assert len(stage_calls) == 2 and stage_calls[1] > 10  # one pass over many pieces
    assert pieces == whole  # same rows, same order
    assert len(whole) == 601
    assert pieces_row["event_count"] == whole_row["event_count"] == 601
    assert json.loads(pieces_row["metadata_json"])["traceName"] == "t"
    assert sorted(p.name for p in tmp_path.rglob("events*.json")) == []  # no piece left behind


@pytest.mark.parametrize("gz", [False, True], ids=["json", "json.gz"])
def test_a_cut_inside_an_element_reads_the_array_once_more_whole(write_kineto, tmp_path, monkeypatch, stage_calls,
                                                                 gz):
    events = _events(200)
    path = write_kineto("t.json.gz" if gz else "t.json", events, gz=gz)
    whole, _ = _rows(Lake(tmp_path / "one"), path)
    assert stage_calls == [1]
    monkeypatch.setattr(kineto_mod, "PIECE_MIN_BYTES", 1)
    monkeypatch.setattr(kineto_mod, "PIECE_BYTES", 3000)
    pieces, _ = _rows(Lake(tmp_path / "pieces"), path)
    # the pieced pass fails (a kernel's args array of objects, or the odd name, was cut), the retry is one file
    assert stage_calls[1] > 10 and stage_calls[2:] == [1]
    assert pieces == whole
    kernel = next(r for r in pieces if r["name"] == "k3")
    assert json.loads(kernel["args_json"])["parts"] == [{"a": 3}, {"b": [3, {"c": 1}]}]
    assert [r["name"] for r in pieces if r["kind"] == "runtime_api"][:8] == (
        ['odd"}, {"name'] + ["cudaLaunchKernel"] * 6 + ['odd"}, {"name'])


def test_an_element_that_is_no_object_after_the_first_batch_falls_back(write_kineto, tmp_path, monkeypatch,
                                                                          stage_calls):
    """DuckDB's error after its first batch reaches Arrow's reader as an OSError: the file is stream-parsed all
    the same (it failed as 'unexpected OSError' before), in one piece or in several."""
    monkeypatch.setattr(kineto_mod, "ROWS_PER_BATCH", 64)
    events: list = _events(1500, traps=False)
    events.insert(2500, 7)  # not an object, after 2500 objects
    path = write_kineto("t.json", events)
    res = ingest_file(path, Lake(tmp_path / "one"))
    assert res.status == "ingested", res.error
    assert res.row["event_count"] == 3001
    assert json.loads(res.row["skipped_counts_json"]) == {"not_an_object": 1}
    assert stage_calls == [1, 1]  # the array read as one file, then the NDJSON fallback
    monkeypatch.setattr(kineto_mod, "PIECE_MIN_BYTES", 1)
    monkeypatch.setattr(kineto_mod, "PIECE_BYTES", 20_000)
    res = ingest_file(path, Lake(tmp_path / "pieces"))
    assert res.status == "ingested", res.error
    assert res.row["event_count"] == 3001
    assert stage_calls[2] > 5 and stage_calls[3:] == [1, 1]  # pieces, one file, the NDJSON fallback
