"""``python -I specs/__main__.py TOOL [OPTIONS]``: a tool of specs/ against the installed wheel.

``-I`` keeps the checkout off the front of ``sys.path``, so ``verified_queue`` is the
installed build under test; the checkout is appended at the end, only to reach
``specs``, which the wheel does not ship. TOOL is a module of specs/ with a ``main``:
``exhaustive``, ``bug_matrix``, ``proof``, ``crosshair_run``, ``interrupt_stress``.
"""

import importlib
import sys
from pathlib import Path

TOOLS = ("exhaustive", "bug_matrix", "proof", "crosshair_run", "interrupt_stress")

# The checkout goes on the path in worker processes too: the exhaustive check spawns
# workers, which import this file again (as __mp_main__) to unpickle their tasks.
sys.path.append(str(Path(__file__).resolve().parent.parent))

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in TOOLS:
        sys.exit(f"usage: python -I specs/__main__.py {{{','.join(TOOLS)}}} [OPTIONS]")
    tool = importlib.import_module(f"specs.{sys.argv[1]}")
    sys.exit(tool.main(sys.argv[2:]))
