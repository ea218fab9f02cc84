"""Where things live. Every path has an embedded default and an environment override."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Paths:
    lake: Path
    warehouse: Path
    inbox: Path
    cache: Path

    @classmethod
    def from_env(cls, base: Path | None = None) -> Paths:
        root = Path(base) if base is not None else Path(os.environ.get("TAXBREAK_HOME", "warehouse"))
        return cls(
            lake=Path(os.environ.get("TAXBREAK_LAKE", root / "lake")),
            warehouse=Path(os.environ.get("TAXBREAK_WAREHOUSE", root / "taxbreak.duckdb")),
            inbox=Path(os.environ.get("TAXBREAK_INBOX", root / "inbox")),
            cache=Path(os.environ.get("TAXBREAK_CACHE", root / "cache")),
        )
