"""``find_nsys`` finds the nsys that tests/ingest/setup_nsys.sh unpacked into the virtual environment (issue 29:
`taxbreak nsys-check` said "no nsys" beside .venv/nsys)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from taxbreak.ingest import nsys_rep


def _exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\necho 2022.4.2.1\n")
    path.chmod(0o755)
    return path


def test_find_nsys_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    venv = tmp_path / "venv"
    monkeypatch.setattr(sys, "prefix", str(venv))
    monkeypatch.delenv(nsys_rep.NSYS_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert nsys_rep.find_nsys() is None
    (venv / "nsys" / "opt" / "b" / "bin").mkdir(parents=True)
    (venv / "nsys" / "opt" / "b" / "bin" / "nsys").write_text("not executable")
    assert nsys_rep.find_nsys() is None  # not executable: not an nsys
    unpacked = _exe(venv / "nsys" / "opt" / "nvidia" / "nsight-systems" / "2022.4.2" / "bin" / "nsys")
    assert nsys_rep.find_nsys() == str(unpacked)  # as setup_nsys.sh unpacks it into .venv/nsys
    on_path = _exe(tmp_path / "path" / "nsys")
    monkeypatch.setenv("PATH", str(on_path.parent))
    assert nsys_rep.find_nsys() == str(on_path)  # PATH first
    monkeypatch.setenv(nsys_rep.NSYS_ENV, str(unpacked))
    assert nsys_rep.find_nsys() == str(unpacked)  # the setting first of all
