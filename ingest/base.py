"""What every adapter returns, and the errors it raises."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa


class IngestError(Exception):
    """A source file cannot be ingested. The message names the file and the problem."""


@dataclass
class TraceInfo:
    """Trace-level facts an adapter learns; filled in while its batches are consumed."""

    source_format: str
    tool_versions: dict[str, Any] = field(default_factory=dict)
    gpu_names: list[str] = field(default_factory=list)
    host_name: str | None = None
    start_epoch_ns: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    skipped_counts: dict[str, int] = field(default_factory=dict)
    source_event_count: int | None = None


@dataclass
class AdapterOutput:
    """``batches`` conform to EVENT_SCHEMA; ``info`` is complete once ``batches`` is exhausted."""

    info: TraceInfo
    batches: Iterator[pa.RecordBatch]
