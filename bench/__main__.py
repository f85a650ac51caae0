"""``python -I bench/__main__.py [OPTIONS | revision REV]``: the benchmark, on the installed wheel.

``-I`` keeps the checkout off the front of ``sys.path``, so ``verified_queue`` is the
installed wheel, the build being measured; the checkout is appended at the end, only
to reach ``bench`` and ``conformance``, which the wheel does not ship.
"""

import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent.parent))

if __name__ == "__main__":
    if sys.argv[1:2] == ["revision"]:
        # ``revision REV``: this build's production queue against the one at a git revision.
        from bench.revision import main as against_revision

        sys.exit(against_revision(sys.argv[2:]))
    from bench.run import main

    sys.exit(main())
