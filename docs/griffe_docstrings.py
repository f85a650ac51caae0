"""A Griffe extension: the package's plain-text docstrings rendered as Markdown for the site.

The docstrings are written to read well in ``help()`` and in an editor, in the
reStructuredText habits of the standard library: ``>>>`` examples inline, roles
such as ``:class:`Block```, and section titles underlined with dashes. Markdown
would read an example as a block quote and an underlined title as a page
heading, so before mkdocstrings renders a docstring this extension fences each
run of examples as a ``pycon`` code block, drops the role prefixes in front of
code spans, turns an underlined title into a bold line and reST's ``::`` into a
colon. The docstrings
themselves stay as they are.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|meth|func|mod|attr|exc|data|obj):(?=`)")
UNDERLINE = re.compile(r"^\s*(-{3,}|={3,})\s*$")
#: A list item at the start of a line: a bullet, a number, or a label such as ``I1.``
#: (the queue's invariants) or ``P1.`` (the pool's), which names the item.
ITEM = re.compile(r"^(?:[*+-] |\d+\. |(?P<label>[A-Z]\d+)\. )")


def _fence_examples(lines: list[str]) -> list[str]:
    """Wrap each doctest (its ``>>>`` lines and the output up to a blank line) in a fence."""
    out: list[str] = []
    in_example = False
    for line in lines:
        starts = line.lstrip().startswith(">>>")
        if starts and not in_example:
            indent = line[: len(line) - len(line.lstrip())]
            out += ["", f"{indent}```pycon"]
            in_example = True
        elif in_example and not line.strip():
            out += [f"{indent}```", ""]
            in_example = False
        out.append(line)
    if in_example:
        out.append(f"{indent}```")
    return out


def _bold_titles(lines: list[str]) -> list[str]:
    """Turn a title underlined with dashes or equals signs into a bold paragraph of its own."""
    out: list[str] = []
    for line in lines:
        if out and out[-1].strip() and UNDERLINE.match(line) and not out[-1].startswith(" "):
            out[-1] = f"**{out[-1].strip()}**"
            out.append("")  # else the title runs into the paragraph below it
            continue
        out.append(line)
    return out


def _lists(lines: list[str]) -> list[str]:
    """Make Markdown lists of the docstrings' lists, outside code blocks.

    Markdown takes a list only after a blank line, and has no labelled items: written
    as in ``help()``, "I1. ... I2. ..." under a sentence ran into one paragraph. Each
    list gets a blank line before it, and a labelled item becomes a bullet that starts
    with its label in bold. Indented lines are left alone: they continue an item, or
    belong to a literal block.
    """
    out: list[str] = []
    in_fence = False
    for line in lines:
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        item = None if in_fence else ITEM.match(line)
        if item is not None:
            previous = out[-1] if out else ""
            if previous.strip() and not previous.startswith(" ") and not ITEM.match(previous):
                out.append("")
            label = item.group("label")
            if label is not None:
                out.append(f"- **{label}.** {line[item.end() :]}")
                continue
        out.append(line)
    return out


def markdown_docstring(text: str) -> str:
    """The docstring ``text`` as the Markdown the site renders."""
    lines = _lists(_bold_titles(_fence_examples(text.splitlines())))
    # reST's "text::" introduces an indented literal block, which Markdown renders as code
    # already; only the doubled colon would show.
    lines = [line[:-1] if line.endswith("::") and line.strip() != "::" else line for line in lines]
    return ROLE.sub("", "\n".join(lines))


class PlainDocstrings(griffe.Extension):
    """Rewrite every docstring Griffe loads into Markdown before it is parsed."""

    def on_instance(self, *, obj: griffe.Object, **_: Any) -> None:
        """Rewrite the docstring of each module, class, function and attribute as it loads."""
        if obj.docstring is not None:
            obj.docstring.value = markdown_docstring(obj.docstring.value)
