"""``python -m verified_queue status``: what is in force, and what a vLLM started from here gets.

It prints :func:`verified_queue.status` for this new process (the build, the
``VERIFIED_QUEUE_CHECKS`` level and the class ``verified_queue.FreeBlockQueue`` names),
then what a vLLM process started from the same environment will do: whether vLLM is
installed, whether the plugin is registered in its ``vllm.general_plugins``
entry-point group, and what ``VERIFIED_QUEUE_VLLM`` makes it install. vLLM itself is
not imported. Inside a running process, with vLLM loaded, ``verified_queue.status()``
also lists each vLLM name the plugin rebound there.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util

import verified_queue
from verified_queue.vllm import plugin

__all__ = ["add_arguments", "describe_vllm", "run"]

#: The plugin's entry point, as ``pyproject.toml`` registers it.
_ENTRY_POINT = "verified_queue.vllm.plugin:register"


def _vllm_version() -> str | None:
    """The installed vLLM's version, ``"unknown"`` if it has no metadata, or ``None``."""
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return "unknown" if importlib.util.find_spec("vllm") is not None else None


def _registered() -> bool:
    """Whether an installed distribution registers the plugin with vLLM."""
    found = importlib.metadata.entry_points(group="vllm.general_plugins")
    return any(entry.value == _ENTRY_POINT for entry in found)


def describe_vllm() -> list[str]:
    """Lines on what a vLLM process started from this environment gets from the plugin.

    Runtime complexity: O(installed distributions)
    """
    version = _vllm_version()
    installed = f"{version} installed" if version else "not installed"
    registered = (
        f"the plugin is registered ({_ENTRY_POINT})"
        if _registered()
        else "the plugin is not registered (verified_queue is not installed as a distribution)"
    )
    try:
        mode = plugin.read_mode()
    except plugin.VllmPluginError as error:
        effect = f"a vLLM process started from here stops: {error}"
    else:
        if mode == "off":
            effect = (
                "a vLLM process started from here rebinds nothing "
                f"({plugin.ENVIRONMENT_VARIABLE} unset or off)"
            )
        else:
            effect = (
                f"a vLLM process started from here rebinds its FreeKVCacheBlockQueue "
                f"({plugin.ENVIRONMENT_VARIABLE}={mode})"
            )
    return [f"vLLM: {installed}; {registered}", f"vLLM: {effect}"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command takes no options.

    Runtime complexity: O(1)
    """
    del parser


def run(args: argparse.Namespace) -> int:
    """Print what is in force in this process and what the vLLM plugin would do; return 0.

    Runtime complexity: that of :func:`describe_vllm`
    """
    del args
    # The banner above names the version and the build: the status's first line would repeat it.
    lines = str(verified_queue.status()).splitlines()[1:]
    for line in [*lines, *describe_vllm()]:
        print(line)
    return 0
