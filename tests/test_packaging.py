"""The installed wheel imports as one namespace (taxbreak.*) and squats no generic top-level names."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(ROOT)],
        check=True,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    wheels = list(out.glob("taxbreak-*.whl"))
    assert len(wheels) == 1
    return wheels[0]


def test_wheel_has_only_the_taxbreak_namespace(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert top == {"taxbreak", "taxbreak-0.1.0.dist-info"}
    # the fixed folders are inside the namespace, SQL files and the schema changelog included
    for expected in ("taxbreak/ingest/__init__.py", "taxbreak/schemas/events.py", "taxbreak/pipeline/__init__.py",
                     "taxbreak/schemas/CHANGELOG.md", "taxbreak/cli/main.py"):
        assert expected in names
    sql_files = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "sql").rglob("*.sql"))
    assert sql_files, "no SQL files under sql/"
    assert [f"taxbreak/{f}" for f in sql_files if f"taxbreak/{f}" not in names] == []


def test_wheel_installed_in_a_clean_target_imports_as_taxbreak(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)], check=True
    )
    code = (
        "import importlib.util, taxbreak.ingest, taxbreak.schemas, taxbreak.cli;"
        "print(taxbreak.ingest.__file__);"
        "print(importlib.util.find_spec('ingest') is None and importlib.util.find_spec('pipeline') is None)"
    )
    # cwd is a fresh folder (the checkout is not on sys.path); PYTHONPATH puts the target dir before the venv's
    # site-packages, where the editable install lives: the import must resolve to the target's copy
    env = {"PYTHONPATH": str(target), "PATH": os.environ.get("PATH", "")}
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    first, second = res.stdout.split()
    assert first.startswith(str(target))
    assert second == "True"
    # the console script entry point resolves to taxbreak.cli:main
    entry = (next(target.glob("taxbreak-*.dist-info")) / "entry_points.txt").read_text()
    assert "taxbreak = taxbreak.cli:main" in entry
