"""``python -I bench/__main__.py [OPTIONS]``: the benchmark, against the installed wheel.

``-I`` keeps the checkout off the front of ``sys.path``, so ``verified_queue`` is the
installed wheel, the build being measured; the checkout is appended at the end, only
to reach ``bench`` and ``conformance``, which the wheel does not ship.
"""

import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent.parent))

if __name__ == "__main__":
    from bench.run import main

    sys.exit(main())
