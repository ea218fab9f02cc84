"""``python -m taxbreak.cli``: the ``taxbreak`` command."""

import sys

from taxbreak.cli.main import main

sys.exit(main())
