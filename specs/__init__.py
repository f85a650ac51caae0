"""Executable specifications of ``verified_queue``: the list model and the checkers built on it.

``specs`` lives in the repository only (it is not shipped in the wheel). It imports the package;
the package never imports it.

- :mod:`specs.model`: :class:`~specs.model.ListModel`, the definition of correct, and the
  identity-only :class:`~specs.model.SpecBlock`.
- :mod:`specs.structure`: compare a queue's links with the model, block by block.
- :mod:`specs.exhaustive`: every operation from every state of a queue of up to N blocks.
- :mod:`specs.contracts`: CrossHair contracts relating the queue to the model.
- :mod:`specs.planted_bugs`: deliberately wrong queues that every checker must reject.
"""
