"""``register`` in this process: it reads ``VERIFIED_QUEUE_VLLM`` before it imports anything.

``test_plugin.py``'s ``test_off_imports_nothing_from_vllm_nor_check_mode`` looks at a new process;
this looks at the running one (where a planted bug of the plugin, swapped in for a run of
``docs/new-code-bug-matrix.md``, is seen), with a refused value too.
"""

from __future__ import annotations

import sys

import pytest

from verified_queue.vllm import plugin
from verified_queue.vllm.plugin import VllmPluginError


@pytest.mark.parametrize("value", [None, "", " OFF ", "yes", "prod"])
def test_register_reads_the_variable_before_it_imports_vllm(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    """In this process: off imports nothing of vLLM, and a bad value is refused before it does."""
    if any(name == "vllm" or name.startswith("vllm.") for name in sys.modules):
        pytest.skip("a vllm is loaded in this process")
    if value is None:
        monkeypatch.delenv(plugin.ENVIRONMENT_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(plugin.ENVIRONMENT_VARIABLE, value)
    if value in ("yes", "prod"):
        with pytest.raises(VllmPluginError, match="expected off, production, checked or trace"):
            plugin.register()
    else:
        plugin.register()
    assert not [name for name in sys.modules if name == "vllm" or name.startswith("vllm.")]
    assert plugin.installed_mode() == "off"
