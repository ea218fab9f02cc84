"""Where the tests find real third-party traces, for every test folder.

Every rule and figure is checked on small traces built by code (the scenario builders beside the tests,
``taxbreak.capture.synthetic``'s Kineto and Nsight writers) and on real public traces. A curated subset of those
(<= 6 MB, each with its source and licence: ``tests/data/SOURCES.md``) is vendored in ``tests/data/public`` so
the real-trace tests run from a fresh clone; the full collection in ``../shared/traces/public`` (same layout) adds
breadth where it is beside the checkout, and is then read first.  A test that needs a file of the full collection
that is not vendored skips, naming the file; the tests over such files parametrise over what is here
(``public_data.available``) and pair each with a stand-in built by code, so no test skips in either setting.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from public_data import PUBLIC_TRACES, VENDORED_TRACES, find


def _absent(what: str) -> str:
    return (f"breadth test: {what} is not vendored in tests/data/public (the full public trace collection is read "
            "from ../shared/traces/public beside the checkout, absent here)")


def public_folder() -> Path:
    """The full collection when it is beside the checkout, else the vendored subset."""
    return PUBLIC_TRACES if PUBLIC_TRACES.is_dir() else VENDORED_TRACES


@pytest.fixture(scope="session")
def public_traces_dir() -> Path:
    """The folder of public traces the tests read (the full collection, else the vendored subset)."""
    return public_folder()


@pytest.fixture(scope="session")
def public_traces(public_traces_dir: Path) -> Path:
    """Same as public_traces_dir (kept for the tests that read every file of it)."""
    return public_traces_dir


@pytest.fixture(scope="session")
def public_trace() -> Callable[[str], Path]:
    """public_trace('nsys-ai/mock.sqlite') -> that file's path (full collection first, then the vendored copy);
    the test skips, naming the file, when neither has it."""

    def resolve(rel: str) -> Path:
        path = find(rel)
        if path is None:
            pytest.skip(_absent(rel))
        return path

    return resolve
