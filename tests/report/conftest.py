from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "_tb_warehouse_build", Path(__file__).parents[1] / "query" / "warehouse_build.py"
)
warehouse_build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(warehouse_build)


@pytest.fixture(scope="session")
def wh(tmp_path_factory: pytest.TempPathFactory, public_traces_dir: Path | None) -> dict:
    return warehouse_build.build(tmp_path_factory.mktemp("wh"), public_traces_dir)


@pytest.fixture(scope="session")
def chromium() -> str:
    exe = shutil.which("chromium")
    if exe is None and shutil.which("apt-get"):
        subprocess.run("apt-get update && apt-get install -y --no-install-recommends chromium", shell=True,
                       capture_output=True, timeout=600, check=False)
        exe = shutil.which("chromium")
    if exe is None:
        pytest.skip("chromium is not installed and `apt-get install chromium` failed (no root or no network)")
    return exe
