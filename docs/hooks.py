"""MkDocs hooks: every example on the site runs as a doctest when it is built.

Every ``>>>`` example on a page is run with :mod:`doctest` before the page is
rendered, and every example in the package's docstrings (the API reference
shows them) once before the build starts. A failing example is a build error,
so the published pages can only show output the code really produces.
tests/cli/test_docs.py runs the same examples in the test suite.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from typing import Any

from mkdocs.exceptions import PluginError

import verified_queue

OPTIONS = doctest.ELLIPSIS


def _failures(test: doctest.DocTest) -> str:
    """Run one doctest; return the report of its failures, empty when every example passed."""
    output: list[str] = []
    runner = doctest.DocTestRunner(optionflags=OPTIONS)
    runner.run(test, out=output.append)
    return "".join(output) if runner.failures else ""


def on_pre_build(**_: Any) -> None:
    """Run the examples in every module's docstrings (the ones the API reference shows)."""
    finder = doctest.DocTestFinder()
    names = ["verified_queue"] + [
        info.name
        for info in pkgutil.iter_modules(verified_queue.__path__, "verified_queue.")
        if info.name != "verified_queue.__main__"
    ]
    for name in names:
        module = importlib.import_module(name)
        for test in finder.find(module):
            report = _failures(test)
            if report:
                raise PluginError(f"a docstring example fails in {test.name}:\n{report}")


def on_page_markdown(markdown: str, *, page: Any, **_: Any) -> str:
    """Run the page's ``>>>`` examples, in one namespace per page, before it is rendered."""
    name = page.file.src_uri
    test = doctest.DocTestParser().get_doctest(markdown, {}, name, name, 0)
    report = _failures(test)
    if report:
        raise PluginError(f"an example fails on {name}:\n{report}")
    return markdown
