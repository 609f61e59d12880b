<<<<<<< HEAD
"""``python -m tangentlab`` is the ``tangentlab`` command (also what ``torchrun -m`` launches)."""
=======
"""``python -m tangentlab ...``: the same as the ``tangentlab`` command."""
>>>>>>> wt-reliability

import sys

from tangentlab.cli import main

<<<<<<< HEAD
if __name__ == "__main__":
    sys.exit(main())
=======
sys.exit(main())
>>>>>>> wt-reliability
