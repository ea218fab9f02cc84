"""Where the tests find real third-party traces, for every test folder.

The suite runs from the repository alone: each rule and figure is checked on small traces built by code (the
scenario builders beside the tests, ``taxbreak.capture.synthetic``'s Kineto and Nsight writers). The real
public traces in ``../shared/traces/public`` add breadth. They stay out of the repository, as their
``SOURCES.md`` asks, so a test that needs one skips, naming the file; CI's clone has them beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

PUBLIC_TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces" / "public"  # ../shared beside the checkout


def _absent(what: Path) -> str:
    return (f"breadth test: {what} is absent (the third-party public traces are not kept in the repository; "
            "they are read from ../shared/traces/public beside the checkout)")


@pytest.fixture(scope="session")
def public_traces_dir() -> Path | None:
    """The public traces folder, or None when it is absent (for fixtures that only add those traces)."""
    return PUBLIC_TRACES if PUBLIC_TRACES.is_dir() else None


@pytest.fixture(scope="session")
def public_traces(public_traces_dir: Path | None) -> Path:
    """The public traces folder; the test skips, saying why, when it is absent."""
    if public_traces_dir is None:
        pytest.skip(_absent(PUBLIC_TRACES))
    return public_traces_dir


@pytest.fixture(scope="session")
def public_trace() -> Callable[[str], Path]:
    """public_trace('nsys-ai/mock.sqlite') -> that file's path; the test skips, naming the file, when it is absent."""

    def resolve(rel: str) -> Path:
        path = PUBLIC_TRACES / rel
        if not path.is_file():
            pytest.skip(_absent(path))
        return path

    return resolve
