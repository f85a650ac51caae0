"""Exit non-zero unless the ``verified_queue`` that Python imports is the mypyc-compiled build.

Run with ``python -I`` (so the checkout's sources cannot shadow the installed wheel) by
every ``*-compiled`` tox environment and by cibuildwheel's test command: a compiled run
that silently tested the pure build would prove nothing.
"""

import sys

import verified_queue

if not verified_queue.COMPILED:
    sys.exit(f"the installed verified_queue is not compiled: {verified_queue.__file__}")
print(f"compiled verified_queue {verified_queue.__version__}: {verified_queue.__file__}")
