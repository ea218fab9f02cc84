from __future__ import annotations

import importlib.util
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
