"""``python -m specs.proof``: prove the lemmas and every operation, one line each.

``--verbose`` lists every obligation with its time; ``--bug NAME`` proves a planted bug instead
(see :func:`specs.proof.driver.main`).
"""

import sys

from specs.proof.driver import main

if __name__ == "__main__":
    sys.exit(main())
