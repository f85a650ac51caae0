"""MkDocs hooks: every example on the site runs as a doctest when it is built.

Every ``>>>`` example on a page is run with :mod:`doctest` before the page is
rendered, and every example in the package's docstrings (the API reference
shows them) and in README.md once before the build starts. README.md's
examples are not on any page's own text: the pages that show them include them
with ``pymdownx.snippets``, after this hook has seen the page, so each example
runs exactly once. A failing example is a build error, so the published pages
can only show output the code really produces. tests/docs/test_docs.py runs the
same examples in the test suite.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from pathlib import Path
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


def on_pre_build(*, config: Any, **_: Any) -> None:
    """Run README.md's examples, and those in every module's docstrings (the API reference's)."""
    readme = Path(config["config_file_path"]).parent / "README.md"
    text = readme.read_text(encoding="utf-8")
    report = _failures(doctest.DocTestParser().get_doctest(text, {}, "README.md", str(readme), 0))
    if report:
        raise PluginError(f"an example fails in README.md:\n{report}")
    finder = doctest.DocTestFinder()
    # walk_packages reaches the subpackages' modules too (verified_queue.kvcache.pool, ...).
    names = ["verified_queue"] + [
        info.name
        for info in pkgutil.walk_packages(verified_queue.__path__, "verified_queue.")
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
