""".nsys-rep reports as they exist in the wild (issue 11 §6) and hostile names (issue 13), through a stand-in `nsys`
script: the version from a report's text when its header has no tag, "needs nsys >= X" instead of a raw export
failure, errors that name the user's report and never the cached export, and names starting with '-'."""

from __future__ import annotations

import json
import sqlite3
import stat
from pathlib import Path

import pytest
from nsys_fixtures import build_tiny_export, ddl

from taxbreak.ingest import Lake, ingest_file
from taxbreak.ingest.base import IngestError
from taxbreak.ingest.nsys_rep import REPORT_SCAN_BYTES, convert_report, report_version

UNTAGGED = b"NVIDIA Tegra Profiler Report\x00\n\x0bLocal (CLI)\x12\x04"  # a header without the 2025@1@1@... tag
VERSION_TEXT = b'2\x1b2023.1.1.127-32365746v0:\x1b2023.1.1.127-32365746v0\xa2\x01\x0e32365746v0'  # session record


def _fake_nsys(bindir: Path, body: str, version: str = "2022.4.2.1-df9881f") -> Path:
    """A stand-in nsys: answers --version, logs every call's arguments (one per line) to bindir/calls, then runs
    ``body`` with the arguments as $@."""
    bindir.mkdir(parents=True, exist_ok=True)
    script = bindir / "nsys"
    script.write_text(
        "#!/bin/sh\n"
        f'for a in "$@"; do printf "%s\\n" "$a"; done >> "{bindir / "calls"}"; echo "--" >> "{bindir / "calls"}"\n'
        f'if [ "$1" = "--version" ]; then echo "NVIDIA Nsight Systems version {version}"; exit 0; fi\n' + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def _calls(nsys: Path) -> list[list[str]]:
    text = (nsys.parent / "calls").read_text()
    return [c.strip("\n").splitlines() for c in text.split("--\n") if c.strip()]


def _report(path: Path, *, near_end: bool) -> Path:
    """An untagged report with the version text in its session record near the end (as nsys writes it: 2.3 MB of
    event data, then the record) or right after the header."""
    filler = bytes(range(256)) * (9 * 1024)  # 2.3 MB of binary without a version-shaped text
    body = filler + VERSION_TEXT + b"\x00" * 100 if near_end else VERSION_TEXT + filler
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(UNTAGGED + body)
    return path


@pytest.mark.parametrize("near_end", [True, False])
def test_version_from_the_text_when_the_header_has_no_tag(tmp_path: Path, near_end: bool) -> None:
    rep = _report(tmp_path / "r.nsys-rep", near_end=near_end)
    assert rep.stat().st_size > 2 * REPORT_SCAN_BYTES  # the text is found in the first or the last MiB only
    assert report_version(rep) == (2023, 1, 1, 127)


def test_version_text_outside_the_scanned_ends_is_unknown(tmp_path: Path) -> None:
    filler = b"\x00" * (REPORT_SCAN_BYTES + 10)
    rep = tmp_path / "mid.nsys-rep"
    rep.write_bytes(UNTAGGED + filler + VERSION_TEXT + filler)
    assert report_version(rep) is None
    rep.write_bytes(b"not a report " + VERSION_TEXT)  # the text alone, without the report magic, is no report
    assert report_version(rep) is None


def test_untagged_report_newer_than_nsys_needs_a_newer_nsys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rep = _report(tmp_path / "in" / "untagged.nsys-rep", near_end=True)
    nsys = _fake_nsys(tmp_path / "bin", "echo 'ProtobufParseException: Version number is invalid' >&2; exit 1\n")
    monkeypatch.setenv("TAXBREAK_NSYS", str(nsys))
    res = ingest_file(rep, Lake(tmp_path / "lake"), cache_dir=tmp_path / "cache")
    assert res.status == "failed"
    assert res.error.startswith(f"{rep}: needs nsys >= 2023.1.1.127: the report was written by nsys 2023.1.1.127, "
                                "newer than the installed nsys 2022.4.2.1")
    assert [c[0] for c in _calls(nsys)] == ["--version"]  # refused before nsys export could die on it


def test_export_failing_on_the_format_says_which_nsys_is_needed(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    rep = tmp_path / "in" / "odd.nsys-rep"
    rep.parent.mkdir()
    rep.write_bytes(UNTAGGED + b"no version text anywhere")
    body = ("echo 'Importing...'\n"
            "echo 'terminate called after throwing an instance of ProtobufParseException' >&2\n"
            "echo 'Version number is invalid' >&2; exit 134\n")
    monkeypatch.setenv("TAXBREAK_NSYS", str(_fake_nsys(tmp_path / "bin", body)))
    with pytest.raises(IngestError) as exc:
        convert_report(rep, tmp_path / "cache")
    msg = str(exc.value)
    assert msg.startswith(f"{rep}: needs nsys newer than 2022.4.2.1: the installed nsys 2022.4.2.1")
    assert "install the Nsight Systems CLI (nsys) version newer than 2022.4.2.1 and put it on PATH" in msg
    assert "Version number is invalid" in msg and "TAXBREAK_NSYS" in msg
    assert "ProtobufParseException" in msg.split("(nsys export: ", 1)[1]  # the raw error is kept, after ours
    assert [p for p in (tmp_path / "cache").rglob("*") if p.is_file()] == []
    # any other failure stays a plain export failure
    monkeypatch.setenv("TAXBREAK_NSYS", str(_fake_nsys(tmp_path / "bin2", "echo 'disk full' >&2; exit 3\n")))
    with pytest.raises(IngestError, match=r"nsys export failed \(exit 3, nsys 2022\.4\.2\.1, report unknown\): disk"):
        convert_report(rep, tmp_path / "cache")


def _copying_nsys(bindir: Path, export: Path) -> Path:
    """A stand-in nsys 2026.2.1 whose export copies ``export`` to the --output path."""
    body = ('while [ $# -gt 0 ]; do if [ "$1" = "--output" ]; then o="$2"; fi; shift; done\n'
            f'cp "{export}" "$o"\n')
    return _fake_nsys(bindir, body, version="2026.2.1.210-1")


def test_a_name_starting_with_a_dash_never_reaches_nsys_as_an_option(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    nsys = _copying_nsys(tmp_path / "bin", build_tiny_export(tmp_path / "tiny.sqlite"))
    monkeypatch.setenv("TAXBREAK_NSYS", str(nsys))
    work = tmp_path / "work"
    work.mkdir()
    (work / "--help.nsys-rep").write_bytes(b"NVIDIA Tegra Profiler Report 2025@1@1@110-xyz\x00binary")
    monkeypatch.chdir(work)
    res = ingest_file(Path("--help.nsys-rep"), Lake(tmp_path / "lake"), cache_dir=Path("cache"))
    assert res.status == "ingested", res.error
    (export_call,) = [c for c in _calls(nsys) if c[0] == "export"]
    assert export_call[-1] == str(work / "--help.nsys-rep")  # absolute: starts with '/', not '-'
    assert all(not a.startswith("-") or a in ("--type", "--force-overwrite", "--output") for a in export_call[1:])
    assert export_call[export_call.index("--output") + 1].startswith("/")


@pytest.mark.parametrize("bad", ["truncated", "no_column"])
def test_errors_about_a_converted_report_name_the_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         bad: str) -> None:
    export = tmp_path / "bad_export.sqlite"
    if bad == "truncated":
        data = build_tiny_export(tmp_path / "full.sqlite").read_bytes()
        export.write_bytes(data[: len(data) // 2])
    else:
        con = sqlite3.connect(export)
        con.execute(ddl("StringIds"))
        con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, eventClass INTEGER, "
                    "globalTid INTEGER, nameId INTEGER)")
        con.commit()
        con.close()
    monkeypatch.setenv("TAXBREAK_NSYS", str(_copying_nsys(tmp_path / "bin", export)))
    rep = tmp_path / "in" / "mine.nsys-rep"
    rep.parent.mkdir()
    rep.write_bytes(b"NVIDIA Tegra Profiler Report 2025@1@1@110-xyz\x00binary")
    cache = tmp_path / "cache"
    res = ingest_file(rep, Lake(tmp_path / "lake"), cache_dir=cache)
    assert res.status == "failed"
    assert res.error.startswith(f"{rep}: "), res.error
    assert str(cache) not in res.error and res.trace_id not in res.error  # no cache file named
    want = "truncated SQLite file" if bad == "truncated" else "lacks required column 'correlationId'"
    assert want in res.error
    assert json.loads(json.dumps(res.row))["source_format"] == "nsys-rep"


@pytest.mark.parametrize("works", [True, False])
def test_without_a_cache_folder_the_export_goes_with_the_ingest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                works: bool) -> None:
    """A library ingest without ``cache_dir`` (issue 30: the reliability suite's leftover): nothing is left under
    the temporary directory, whether nsys converted the report or failed on it; it used to leave
    ``$TMPDIR/taxbreak-nsys-cache``, shared by every user of the machine."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr("tempfile.tempdir", None)  # read TMPDIR again
    if works:
        nsys = _copying_nsys(tmp_path / "bin", build_tiny_export(tmp_path / "tiny.sqlite"))
    else:
        nsys = _fake_nsys(tmp_path / "bin", "echo 'disk full' >&2; exit 3\n")
    monkeypatch.setenv("TAXBREAK_NSYS", str(nsys))
    rep = tmp_path / "in" / "r.nsys-rep"
    rep.parent.mkdir()
    rep.write_bytes(b"NVIDIA Tegra Profiler Report 2025@1@1@110-xyz\x00binary")
    res = ingest_file(rep, Lake(tmp_path / "lake"), cache_dir=None)
    assert res.status == ("ingested" if works else "failed"), res.error
    assert sorted(p.name for p in tmp.iterdir()) == []
