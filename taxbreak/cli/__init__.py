"""The ``taxbreak`` command (argparse, the standard library's parser, for every subcommand).

``taxbreak.cli.main`` holds the command table and ``main``; ``common`` what every command shares (output, progress,
exit codes); ``ingest``, ``analyze`` and ``forget`` the commands that drive the lake and the engine.  The feature and
reader modules add their own subcommands (``add_*_parser``).  docs/architecture.md "The map" shows where it sits.
"""

from taxbreak.cli.common import EXIT_BROKEN_PIPE, EXIT_BUSY, EXIT_INVARIANT_BROKEN
from taxbreak.cli.main import COMMANDS, build_parser, main

__all__ = ["COMMANDS", "EXIT_BROKEN_PIPE", "EXIT_BUSY", "EXIT_INVARIANT_BROKEN", "build_parser", "main"]
