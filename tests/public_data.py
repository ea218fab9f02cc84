"""Where the real third-party traces are, for tests/conftest.py and for the tests that parametrise at collection.

The full collection ``../shared/traces/public`` (beside the checkout) is read first, then the curated subset vendored
in ``tests/data/public`` (tests/data/SOURCES.md).  ``TAXBREAK_TESTS_VENDORED_ONLY=1`` runs as a fresh clone would,
with no ``../shared``.  A test over a file of the full collection that is not vendored is parametrised over
``available(...)`` and pairs it with a stand-in built by code that takes the same code path with hand-checked
values, so neither setting skips.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

PUBLIC_TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces" / "public"  # ../shared beside the checkout
if os.environ.get("TAXBREAK_TESTS_VENDORED_ONLY"):  # run as a fresh clone would, with no ../shared beside it
    PUBLIC_TRACES = Path("/nonexistent/shared/traces/public")
VENDORED_TRACES = Path(__file__).resolve().parent / "data" / "public"  # the curated subset (tests/data/SOURCES.md)


def find(rel: str) -> Path | None:
    """The file ``rel`` of the collection: the full collection first, then the vendored copy; None when neither."""
    for folder in (PUBLIC_TRACES, VENDORED_TRACES):
        if (folder / rel).is_file():
            return folder / rel
    return None


def available(rels: Iterable[str]) -> list[str]:
    """The files of ``rels`` present here (sorted), for parametrising at collection time."""
    return sorted(rel for rel in rels if find(rel) is not None)
