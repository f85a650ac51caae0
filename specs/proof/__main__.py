"""``python -m specs.proof``: prove the lemmas, every method and the walk, one line each;
then the two exhaustive checks (copy and pickle, the fault model), each said to be one.

``--verbose`` lists every obligation with its time; ``--bug NAME`` proves a planted bug instead
(see :func:`specs.proof.driver.main`).
"""

import sys

from specs.proof.driver import main

if __name__ == "__main__":
    sys.exit(main())
