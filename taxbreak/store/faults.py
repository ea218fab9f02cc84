"""The crash tests' kill points: every writer step that must leave the warehouse in its before or after state
calls ``fault_point`` (docs/architecture.md "Writing the warehouse").  A leaf: the writer and the marts both use it."""

from __future__ import annotations

import os
import signal

FAULT_ENV = "TAXBREAK_FAULT_POINT"


def fault_point(name: str) -> None:
    """Crash-test hook: SIGKILL this process at the named point when ``$TAXBREAK_FAULT_POINT`` lists it
    (comma-separated).  Points: ``publish:<table>`` (a table written, its transaction open), ``before_commit``,
    ``after_commit`` (before the marts), ``marts_staged`` (every marts file of the write staged, none renamed into
    place), ``marts_renamed`` (renamed, the marts manifest not yet replaced), ``marts_committed`` (the manifest
    replaced, the snapshot not yet built), ``snapshot_copied`` (the snapshot written, not yet renamed into place),
    ``snapshot_published`` (renamed, replaced marts files not yet deleted)."""
    wanted = os.environ.get(FAULT_ENV)
    if wanted and name in {w.strip() for w in wanted.split(",")}:
        os.kill(os.getpid(), signal.SIGKILL)
