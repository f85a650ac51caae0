"""mypyc's class options, and a stand-in for them where mypyc is not installed.

The compiled build reads ``@mypyc_attr(...)`` on the classes of ``block.py`` and
``queue.py`` while compiling; the compiled modules then run without
``mypy_extensions``. The pure-Python build has no runtime dependencies, so there the
decorator is a stand-in that returns the class unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

__all__ = ["mypyc_attr"]

_Class = TypeVar("_Class")

try:
    from mypy_extensions import mypyc_attr
except ImportError:  # the pure-Python build has no runtime dependencies

    def mypyc_attr(*_names: str, **_options: object) -> Callable[[_Class], _Class]:
        """Stand in for mypyc's class options, which mean nothing to the interpreter."""
        return lambda cls: cls
