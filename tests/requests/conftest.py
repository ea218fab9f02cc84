"""Fixtures for the per-request attribution tests: tiny lakes written by code (the row builders are in
requests_support.py) and where the real SGLang / vLLM traces are found (../shared first, then tests/data/public)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from public_data import find
from requests_support import write_trace

from taxbreak.ingest.lake import Lake


@pytest.fixture()
def lake_builder(tmp_path: Path) -> Callable[..., Lake]:
    lake = Lake(tmp_path / "lake")

    def add(trace_id: str, rows: list[dict], **kw: object) -> Lake:
        write_trace(lake, trace_id, rows, **kw)
        return lake

    return add


@pytest.fixture(scope="session")
def real_trace() -> Callable[[str], Path]:
    """real_trace('tracelens/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz'): ../shared/traces/public first,
    then the vendored copy in tests/data/public (tests/public_data.py; TAXBREAK_TESTS_VENDORED_ONLY=1 runs as a fresh
    clone); skips, naming the file, when neither has it (the tests parametrise over what is here instead)."""

    def resolve(rel: str) -> Path:
        path = find(rel)
        if path is None:
            pytest.skip(f"needs the public trace {rel} (tests/data/public or ../shared/traces/public)")
        return path

    return resolve
