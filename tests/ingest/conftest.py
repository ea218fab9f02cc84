"""Shared fixtures for tests/ingest: a temporary lake, a Kineto trace writer (the public traces: tests/conftest.py)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from taxbreak.ingest import Lake


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    return Lake(tmp_path / "lake")


KinetoWriter = Callable[..., Path]


@pytest.fixture
def write_kineto(tmp_path: Path) -> KinetoWriter:
    """write_kineto(name, events, meta=None, gz=False, raw=None, trailer=None) -> path of a Kineto JSON trace.

    The text is written the way torch does: ``meta`` keys first, then ``traceEvents``, then ``trailer`` keys.
    Numbers given as ``RawNumber('1712195495521131.125')`` are written verbatim (tests control every digit).
    ``raw`` (bytes) bypasses the builder and is written as is.
    """

    def write(
        name: str, events: list[Any] | None = None, meta: dict[str, Any] | None = None, *, gz: bool = False,
        raw: bytes | None = None, trailer: dict[str, Any] | None = None,
    ) -> Path:
        if raw is None:
            raw = render_kineto(events or [], meta or {}, trailer).encode()
        path = tmp_path / "traces" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.compress(raw) if gz else raw)
        return path

    return write


class RawNumber(str):
    """A JSON number written exactly as given (e.g. '1712195495521131.125')."""


@pytest.fixture
def raw_number() -> type[RawNumber]:
    """The RawNumber class (test modules take it as a fixture; conftest is not importable by name)."""
    return RawNumber


def _dump(value: Any) -> str:
    if isinstance(value, RawNumber):
        return str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {_dump(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_dump(v) for v in value) + "]"
    return json.dumps(value)


def render_kineto(events: list[Any], meta: dict[str, Any], trailer: dict[str, Any] | None = None) -> str:
    head = "".join(f"  {json.dumps(k)}: {_dump(v)},\n" for k, v in meta.items())
    body = ",\n".join("  " + _dump(e) for e in events)
    tail = "".join(f",\n  {json.dumps(k)}: {_dump(v)}" for k, v in (trailer or {}).items())
    return "{\n" + head + '  "traceEvents": [\n' + body + "\n  ]" + tail + "\n}\n"
