"""``python -m tangentlab ...``: the same as the ``tangentlab`` command."""

import sys

from tangentlab.cli import main

sys.exit(main())
