"""The commands of ``python -m verified_queue``, one module each.

Each command module exposes ``add_arguments(parser)`` and ``run(args) -> int``;
``verified_queue/__main__.py`` parses the command line and imports only the module
of the command it runs. Nothing here is imported by the queue, check mode or the
block-pool client.
"""

from __future__ import annotations

import sys

__all__ = ["PROG", "USAGE_ERROR", "usage_error"]

#: How the commands are invoked, for messages.
PROG = "python -m verified_queue"

#: Exit status for arguments the command refuses.
USAGE_ERROR = 2


def usage_error(prog: str, message: str) -> int:
    """Print ``message`` as argparse's one-line errors read, on stderr; return :data:`USAGE_ERROR`.

    The parser's own errors (``__main__._Parser``) and a command's checks of its
    arguments' values after parsing read the same.
    """
    print(f"{prog}: error: {message} (see --help)", file=sys.stderr)
    return USAGE_ERROR
