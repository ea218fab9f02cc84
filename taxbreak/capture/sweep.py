"""Sweeps: batch sizes x sequence lengths x phases, one trace per point.

A ``prefill`` point generates 1 token (the prefill forward only); a ``decode`` point generates ``tokens`` tokens
(the prefill plus ``tokens - 1`` decode steps; the pipeline scopes decode figures by the step phases). Each file is
named ``<model>_bs<B>_sl<S>_<phase>.json.gz`` and its sidecar carries the ``sweep`` block
``{"name", "batch_size", "seq_len", "phase"}`` so the pipeline groups the points of one sweep.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taxbreak.capture.profile import CaptureError, capture_generation

PHASES = ("prefill", "decode")


@dataclass(frozen=True)
class SweepPoint:
    batch_size: int
    seq_len: int
    phase: str

    def file_name(self, model_label: str) -> str:
        return f"{model_label}_bs{self.batch_size}_sl{self.seq_len}_{self.phase}.json.gz"


def model_label(model: str) -> str:
    """The file-name label of a model: ``dense``/``moe``, or a local model folder's name."""
    label = model if model in ("dense", "moe") else Path(model).name
    return "".join(c if c.isalnum() or c in "-." else "-" for c in label) or "model"


def sweep_points(batch_sizes: list[int], seq_lens: list[int], phases: list[str]) -> list[SweepPoint]:
    bad = [p for p in phases if p not in PHASES]
    if bad:
        raise CaptureError(f"unknown phase(s) {bad}: use {', '.join(PHASES)}")
    return [SweepPoint(b, s, p) for s in seq_lens for b in batch_sizes for p in phases]


def run_sweep(
    out_dir: str | os.PathLike[str],
    *,
    model: str = "dense",
    batch_sizes: list[int],
    seq_lens: list[int],
    phases: list[str],
    tokens: int = 4,
    name: str | None = None,
    log: Callable[[str], None] | None = None,
    **capture_kwargs: Any,
) -> list[Path]:
    """Capture every point; prints one progress line per point through ``log`` (stderr by default)."""
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    if tokens < 2 and "decode" in phases:
        raise CaptureError("a decode point needs --tokens >= 2 (the prefill produces the first token)")
    label = model_label(model)
    sweep_name = name or f"{label}_sweep"
    points = sweep_points(batch_sizes, seq_lens, phases)
    out = Path(out_dir)
    written: list[Path] = []
    for i, pt in enumerate(points, 1):
        path = out / pt.file_name(label)
        t0 = time.monotonic()
        capture_generation(
            path,
            model=model,
            batch_size=pt.batch_size,
            prompt_len=pt.seq_len,
            output_tokens=1 if pt.phase == "prefill" else tokens,
            sweep={"name": sweep_name, "batch_size": pt.batch_size, "seq_len": pt.seq_len, "phase": pt.phase},
            **capture_kwargs,
        )
        log(f"[{i}/{len(points)}] {path}  ({time.monotonic() - t0:.1f} s)")
        written.append(path)
    return written
