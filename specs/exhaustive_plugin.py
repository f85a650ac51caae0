"""The vLLM plugin, every short history of a process: each sequence of its actions, none left out.

``tests/vllm/test_plugin_machine.py``'s ``PluginMachine`` drives a process on a stand-in vLLM
(imports and reloads of vLLM's modules, ``VERIFIED_QUEUE_VLLM`` set, ``register``, ``install``,
``uninstall``, the plugin reloaded or loaded twice, vLLM's ``BlockPool`` built) through random
histories, and after every step compares every binding, the status, the plugin's finders and
the lines logged with its model (``tests/vllm/plugin_model.py``). This runs the same machine,
the same model and the same checks through *every* sequence of up to ``depth`` actions of
:data:`ACTIONS` (:func:`specs.sequences.every_sequence`), each from a new process: a bug of the
plugin that any such history shows is found for certain.

The machine and its layout are given by the caller (the test builds them: ``specs`` does not
import the tests); each action is one of the machine's rules, called with fixed arguments, when
the rule's preconditions hold. The machine's invariants run after the start and after every
action, as Hypothesis runs them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import verified_queue
from specs.sequences import Action, Report, every_sequence

__all__ = ["ACTIONS", "INVARIANTS", "FixedData", "check_plugin"]

#: The machine's invariants, run after the start and after every action.
INVARIANTS = (
    "every_binding_is_the_models",
    "one_finder_while_installed",
    "the_status_is_the_models",
)

#: Where Hypothesis keeps a rule (its ``preconditions`` with it) on the rule's function.
RULE = "hypothesis_stateful_rule"

#: The alphabet: (rule, its arguments). Every module imported, vLLM's ``kv_cache_utils``
#: reloaded, ``register`` under each kind of value (unset, off, two modes, a bad value), each
#: mode installed directly and a value ``install`` refuses, ``uninstall`` from the plugin and
#: from a second copy, the plugin reloaded, a second copy loaded, vLLM's ``BlockPool`` built.
ACTIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("import_a_module", {"name": "vllm.v1.core.block_pool"}),
    ("import_a_module", {"name": "vllm.v1.core.kv_cache_manager"}),
    ("import_a_module", {"name": "vllm.v1.other"}),
    ("import_a_module", {"name": "vllm.v1.own_classes"}),
    ("import_a_module", {"name": "vllm_outside"}),
    ("reload_kv_cache_utils", {}),
    ("start_vllm", {"value": None, "via": 0}),
    ("start_vllm", {"value": " OFF ", "via": 0}),
    ("start_vllm", {"value": "checked", "via": 0}),
    ("start_vllm", {"value": "TRACE", "via": 0}),
    ("start_vllm", {"value": "yes", "via": 0}),
    ("install", {"mode": "checked", "via": 0}),
    ("install", {"mode": "trace", "via": 0}),
    ("install", {"mode": "Production", "via": 0}),
    ("uninstall", {"via": 0}),
    ("uninstall", {"via": 1}),
    ("reload_the_plugin", {}),
    ("load_another_copy", {}),
    ("build_a_pool", {}),
)


class FixedData:
    """A stand-in for Hypothesis's ``st.data()`` that draws the values it was given, in order."""

    def __init__(self, *values: object) -> None:
        self.values = list(values)

    def draw(self, _strategy: object, label: object = None) -> object:  # noqa: ARG002 -- draw's signature
        """The next value given."""
        return self.values.pop(0)


def _label(rule: str, arguments: dict[str, Any]) -> str:
    return f"{rule}({', '.join(f'{key}={value!r}' for key, value in arguments.items())})"


def _invariants(machine: Any) -> None:
    for name in INVARIANTS:
        getattr(machine, name)()


def _action(rule: str, arguments: dict[str, Any]) -> Action[Any]:
    def apply(machine: Any) -> None:
        getattr(machine, rule)(**arguments)
        _invariants(machine)

    def enabled(machine: Any) -> bool:
        found = getattr(getattr(type(machine), rule), RULE, None)
        if found is None:  # a renamed rule, or a Hypothesis that keeps rules elsewhere
            raise LookupError(f"{rule} is no rule of {type(machine).__name__}")
        return all(condition(machine) for condition in found.preconditions)

    return Action(_label(rule, arguments), apply, enabled)


def check_plugin(machine_class: Callable[[], Any], layout: str, depth: int = 3) -> Report:
    """Every sequence of up to ``depth`` actions of :data:`ACTIONS` on ``machine_class``.

    ``machine_class``: the plugin machine over its layouts, the block derived or not (its
    ``derived``, which this sets as ``verified_queue.COMPILED`` for the run, as the machine's
    tests do); ``layout``: the name of the layout each process starts on.
    """
    variable = "VERIFIED_QUEUE_VLLM"
    saved = (getattr(verified_queue, "COMPILED"), os.environ.pop(variable, None))  # noqa: B009 -- mypy
    setattr(verified_queue, "COMPILED", getattr(machine_class, "derived"))  # noqa: B009, B010
    # The rules note events (``hypothesis.event``), which only a Hypothesis test may: a no-op here.
    (namespace,) = {
        id(vars(sys.modules[cls.__module__])): vars(sys.modules[cls.__module__])
        for cls in getattr(machine_class, "__mro__")  # noqa: B009 -- a class's
        if "register" in vars(cls)
    }.values()
    noted = namespace.get("event")
    namespace["event"] = lambda *_arguments: None
    try:

        def start() -> Any:
            machine = machine_class()
            machine.start(FixedData(layout))
            _invariants(machine)
            return machine

        alphabet = [_action(rule, arguments) for rule, arguments in ACTIONS]
        return every_sequence(start, alphabet, depth, close=lambda machine: machine.teardown())
    finally:
        namespace["event"] = noted
        setattr(verified_queue, "COMPILED", saved[0])  # noqa: B010 -- a module's flag
        os.environ.pop(variable, None)
        if saved[1] is not None:
            os.environ[variable] = saved[1]
