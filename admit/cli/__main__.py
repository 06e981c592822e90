"""``python -m admit.cli ...``: the ``admit`` command (tests, bench/ and the real plane start it this way)."""

import sys

from . import main

sys.exit(main())
