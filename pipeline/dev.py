"""``dg dev`` that stops on SIGTERM wherever it is started from: ``python -m taxbreak.pipeline.dev [dg dev options]``
(``make dev``).

Why (issue 29, docs/orchestration.md "Stopping it"): ``dagster dev`` maps SIGTERM to whatever SIGINT does in its process
(``dagster._utils.interrupts.setup_interrupt_handlers``). A job started with ``&`` from a non-interactive shell (a
script, a CI step, ``timeout ... &``) inherits SIGINT *ignored*, Python keeps an inherited ignored SIGINT,
so ``dg dev`` then ignores SIGTERM too, and so do the webserver and daemon it starts (they stop only through their
shutdown pipe). This launcher sets both signals back to their defaults and replaces itself with ``dg dev``
(``os.execv``: same pid, so a supervisor's SIGTERM reaches ``dg dev`` itself): Python then turns SIGINT into
KeyboardInterrupt, Dagster maps SIGTERM onto it, and ``dg dev`` shuts its webserver, daemon and code servers down
(about a second on 2 cores; ``tests/pipeline/test_dev.py``).

It imports nothing from Dagster; it sets ``VIRTUAL_ENV`` to the venv it runs from where none is active, which is the
one ``dg`` would find in the project folder anyway (otherwise ``dg`` warns twice that they differ).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path


def dg_dev_argv(argv: list[str]) -> list[str]:
    """The command this launcher becomes: the ``dg`` beside this Python, ``dev``, then the caller's options."""
    return [str(Path(sys.executable).with_name("dg")), "dev", *argv]


def main(argv: list[str] | None = None) -> None:
    args = dg_dev_argv(sys.argv[1:] if argv is None else argv)
    if not os.access(args[0], os.X_OK):
        sys.exit(f"taxbreak.pipeline.dev: {args[0]} not found: install the project's dev requirements "
                 "(`make test` builds .venv with dagster-dg-cli)")
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)  # kept across exec; the new Python installs its SIGINT handler on it
    if not os.environ.get("VIRTUAL_ENV"):
        os.environ["VIRTUAL_ENV"] = sys.prefix
    sys.stdout.flush()
    os.execv(args[0], args)


if __name__ == "__main__":
    main()
