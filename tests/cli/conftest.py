"""Shared fixtures for the command-line tests: the hand-computed scenario traces of tests/sql/scenarios.py in a
lake, and a runner for ``taxbreak`` as a separate process (exit status, stdout and stderr as a user sees them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import Run, build_mixed


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A folder with the mixed scenario in lake/ and no warehouse yet."""
    build_mixed(tmp_path / "lake")
    return tmp_path


@pytest.fixture
def run(home: Path) -> Run:
    """run(*args, env=None, cwd=home) -> CompletedProcess of ``python -m taxbreak.cli ARGS`` with the paths of
    ``home`` in the environment (TAXBREAK_HOME)."""

    def _run(*args: str, env: dict | None = None, cwd: Path | None = None, timeout: float = 120,
             stdout: int | None = subprocess.PIPE) -> subprocess.CompletedProcess:
        full = {k: v for k, v in os.environ.items() if not k.startswith("TAXBREAK_")}
        full["TAXBREAK_HOME"] = str(home)
        full.update(env or {})
        return subprocess.run([sys.executable, "-m", "taxbreak.cli", *args], cwd=cwd or home, env=full,
                              stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=timeout)

    return _run
