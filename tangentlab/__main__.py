"""``python -m tangentlab`` is the ``tangentlab`` command (also what ``torchrun -m`` launches)."""

import sys

from tangentlab.cli import main

if __name__ == "__main__":
    sys.exit(main())
