"""``python -m tangentlab ...``: the ``tangentlab`` command (also what ``torchrun -m`` launches).

The guard matters: worker processes started with ``spawn`` import this module again as
``__mp_main__`` and must not run the command a second time.
"""

import sys

from tangentlab.cli import main

if __name__ == "__main__":
    sys.exit(main())
