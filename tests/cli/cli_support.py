"""Helpers of the command-line tests that test modules import by name (``from cli_support import ...``): a module
of its own, not conftest.py, since every test folder has a conftest.py and, when pytest is given several folders (or
collects all of them, as the xdist workers of ``make test`` do), ``import conftest`` finds whichever it loaded last."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the scenario builders live in tests/sql

from sql.scenarios import FUSION_ID, MIXED_ID, build_mixed, fusion_rows, write_trace  # noqa: E402

from taxbreak.ingest import Lake  # noqa: E402

__all__ = ["FUSION_ID", "MIXED_ID", "Run", "add_fusion", "build_mixed"]

Run = Callable[..., subprocess.CompletedProcess]


def add_fusion(lake_root: Path) -> None:
    """The fusion scenario trace (tests/sql/scenarios.py) added to a lake."""
    write_trace(Lake(lake_root), FUSION_ID, fusion_rows(), gpu="NVIDIA H100 80GB HBM3", file_name="fusion.json")
