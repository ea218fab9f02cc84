"""`taxbreak ingest DIR`: the good file lands, the bad one is reported, the exit status says so."""

from __future__ import annotations

from taxbreak.cli import main
from taxbreak.ingest import Lake

GOOD = (b'{"schemaVersion": 1, "traceEvents": [\n'
        b'{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7, "ts": 10.5, "dur": 2.25},\n'
        b'{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 7, "ts": 11, "dur": 1,'
        b' "args": {"correlation": 3}},\n'
        b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 13, "dur": 4,'
        b' "args": {"device": 0, "stream": 7, "correlation": 3}}\n], "traceName": "good"}')


def test_directory_with_one_good_and_one_bad_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TAXBREAK_HOME", str(tmp_path / "home"))
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "good.json").write_bytes(GOOD)
    (inbox / "bad.json").write_bytes(GOOD[:60])  # truncated
    lake_dir = tmp_path / "lake"

    assert main(["ingest", str(inbox), "--lake", str(lake_dir)]) == 1
    out, err = capsys.readouterr()
    assert "good.json" in out and "kernel 1" in out
    assert "FAILED" in err and "bad.json" in err and "truncated JSON" in err

    rows = {r["file_name"]: r for r in Lake(lake_dir).catalogue().to_pylist()}
    assert rows["good.json"]["status"] == "ingested" and rows["good.json"]["event_count"] == 3
    assert rows["bad.json"]["status"] == "failed" and "truncated JSON" in rows["bad.json"]["error"]
    assert [p.name for p in (lake_dir / "events").iterdir()] == [f"trace_id={rows['good.json']['trace_id']}"]

    # again: the good file is already in the lake, the bad one still fails
    assert main(["ingest", str(inbox), "--lake", str(lake_dir)]) == 1
    out, _ = capsys.readouterr()
    assert "already in the lake" in out
    assert len(list((lake_dir / "events").iterdir())) == 1


def test_a_folder_of_links_says_they_were_skipped(tmp_path, capsys):
    """Issue 30 item 6: a folder holding only symbolic links said "no trace files found", no more."""
    (tmp_path / "real.json").write_bytes(GOOD)
    folder = tmp_path / "links"
    folder.mkdir()
    (folder / "a.json").symlink_to(tmp_path / "real.json")
    (folder / "sub").symlink_to(tmp_path)
    assert main(["ingest", str(folder), "--lake", str(tmp_path / "lake")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"no trace files found in: {folder} (2 symbolic links skipped, e.g. {folder / 'a.json'}: folders are read "
        "without following links; name a link itself to ingest what it points to)")
    # named itself, a link is read
    assert main(["ingest", str(folder / "a.json"), "-q", "--lake", str(tmp_path / "lake")]) == 0
