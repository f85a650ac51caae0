"""tox's inline plugin (``toxfile.py``, beside ``tox.ini``): skip what this machine cannot build.

Everything else the default ``tox`` run needs comes from the package index: the tools
from pyproject.toml's dependency groups, Node.js for pyright with ``pyright[nodejs]``
(``typing-downstream``), vLLM's wheels by ``conformance/fetch.py`` (``vllm``). The one
thing the index cannot bring is a C compiler, which the mypyc-compiled build
(``compiled``, ``vllm-compiled``, ``py31x-compiled``, ``bench-compiled``, ...) needs. On a
machine without one, such an environment is skipped before it builds anything, with one
line saying what to install, as tox skips an environment whose Python is missing; where
missing interpreters fail the run (``TOX_SKIP_MISSING_INTERPRETERS=false``, as CI sets), a
missing compiler fails it too.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sysconfig
from collections.abc import Callable, Mapping
from typing import Any

from tox.plugin import impl
from tox.tox_env.errors import Fail, Skip

#: The factor of the environments that build the compiled wheel (``tox.ini``, ``[testenv]``).
COMPILED_FACTOR = "compiled"


def compiler_problem(
    environ: Mapping[str, str] = os.environ,
    config_var: Callable[[str], Any] = sysconfig.get_config_var,
    which: Callable[[str], str | None] = shutil.which,
    os_name: str = os.name,
) -> str | None:
    """Why the compiled build cannot be made here (no C compiler on ``PATH``), or ``None``.

    The compiler is the one Python's own build used (``sysconfig``'s ``CC``), which is
    what the build of C extensions runs, unless ``CC`` overrides it. Windows' compiler is
    found another way, and is not checked.
    """
    if os_name == "nt":
        return None
    command = environ.get("CC") or config_var("CC") or "cc"
    words = shlex.split(str(command))
    program = words[0] if words else "cc"
    if which(program) is not None:
        return None
    return (
        f"no C compiler ({program!r}, which builds Python's C extensions here, is not on PATH): "
        "the compiled build needs one; install gcc (apt install gcc, dnf install gcc) or clang "
        "(macOS: xcode-select --install), or set CC"
    )


def _builds_compiled(name: str) -> bool:
    """Whether the environment ``name`` builds the compiled wheel (it has the factor)."""
    return COMPILED_FACTOR in name.split("-")


@impl
def tox_on_install(tox_env: Any, arguments: Any, section: str, of_type: str) -> None:
    """Before a compiled environment installs anything: skip it (or fail) without a compiler."""
    del arguments, section, of_type
    if not _builds_compiled(tox_env.conf.name):
        return
    problem = compiler_problem()
    if problem is None:
        return
    if tox_env.core["skip_missing_interpreters"]:
        raise Skip(problem)
    raise Fail(problem)
