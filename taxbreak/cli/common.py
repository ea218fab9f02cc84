"""What every ``taxbreak`` command shares: output (``emit``, ``note``, ``dumps``), progress bars, exit codes and the
options every subcommand takes (``add_common``).

Output rules: results go to stdout, progress and notes to stderr.  Progress bars (``tqdm``) are drawn only on a
terminal and never with ``-q``; elsewhere each finished step prints one plain line.  Names read from traces
(kernels, ops, files) are passed through ``taxbreak.store.query.printable`` before they reach a terminal.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from typing import Any

from taxbreak import __version__
from taxbreak.store.query import printable

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a writer whose reader left
EXIT_INVARIANT_BROKEN = 4  # a writer's computed rows break an invariant of sql/checks: nothing was published
EXIT_BUSY = 3  # the warehouse stayed busy (another writer) for longer than the wait allows


def version() -> str:
    try:
        from importlib.metadata import version as _v

        return _v("taxbreak")
    except Exception:  # noqa: BLE001 - a source checkout without install metadata
        return __version__


def emit(text: str = "", *, err: bool = False) -> None:
    """Print ``text`` with its terminal control characters escaped (names come from untrusted traces)."""
    print(printable(text), file=sys.stderr if err else sys.stdout)


def note(args: argparse.Namespace, text: str) -> None:
    """A line on stderr that ``-q`` silences."""
    if not getattr(args, "quiet", False):
        emit(text, err=True)


def dumps(data: Any) -> str:
    return json.dumps(data, indent=2, default=str)  # ASCII-escaped: no control character reaches the terminal


# -- progress ------------------------------------------------------------------------------------------------------
def bars_on(args: argparse.Namespace) -> bool:
    return not getattr(args, "quiet", False) and sys.stderr.isatty()


def _terminal_size() -> tuple[int, int]:
    """Columns and rows of the terminal on stderr (100 x 20 when it reports 0 x 0, as a fresh pseudo-terminal does:
    tqdm would then draw nothing)."""
    try:
        size = os.get_terminal_size(sys.stderr.fileno())
        cols, rows = size.columns, size.lines
    except (OSError, ValueError):
        cols = rows = 0
    return (cols if cols > 0 else 100), (rows if rows > 0 else 20)


class PhaseBar:
    """One tqdm bar on stderr whose description names the current phase; a phase with no counter updates still
    shows its elapsed time (a ticker thread refreshes the bar).  Does nothing when ``enabled`` is false."""

    def __init__(self, label: str, enabled: bool) -> None:
        self.label = label
        self.enabled = enabled
        self.bar = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def phase(self, name: str, total: int | None = None, unit: str = "it", unit_scale: bool = False) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm

        cols, rows = _terminal_size()
        with self._lock:
            if self.bar is not None:
                self.bar.close()
            self.bar = tqdm(total=total, desc=f"{self.label} {name}", unit=unit, unit_scale=unit_scale,
                            file=sys.stderr, leave=False, ncols=cols, nrows=rows, mininterval=0.2)
        if self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                if self.bar is not None:
                    self.bar.refresh()

    def update_to(self, done: int) -> None:
        if self.bar is not None:
            with self._lock:
                self.bar.update(done - self.bar.n)

    def advance(self, n: int) -> None:
        if self.bar is not None:
            with self._lock:
                self.bar.update(n)

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=2)
        with self._lock:
            if self.bar is not None:
                self.bar.close()
                self.bar = None


class IngestProgress(PhaseBar):
    """An ingest's phases: read (bytes, from the adapter's ``progress(done, total)``), parse (until the first batch
    of events), write (events written to the lake)."""

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None or not self.bar.desc.endswith(" read"):
            self.phase("read", total=total, unit="B", unit_scale=True)
        self.update_to(done)


def add_common(p: argparse.ArgumentParser, top: bool) -> None:
    # on a subcommand the defaults are suppressed, so `taxbreak -q CMD` and `taxbreak CMD -q` both work
    default: Any = False if top else argparse.SUPPRESS
    p.add_argument("-q", "--quiet", action="store_true", default=default,
                   help="print results only: no progress bars, no notes")
    p.add_argument("-v", "--verbose", action="store_true", default=default,
                   help="print timings and details")
