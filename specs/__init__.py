"""Executable specifications of ``verified_queue``: the list model and the checkers built on it.

``specs`` lives in the repository only (it is not shipped in the wheel). It imports the package;
the package never imports it.

- :mod:`specs.model`: :class:`~specs.model.ListModel`, the definition of correct, and the
  identity-only :class:`~specs.model.SpecBlock`.
- :mod:`specs.structure`: compare a queue's links with the model, block by block.
- :mod:`specs.world`: blocks and queues wired into a state by hand, and snapshots of every
  link, which the checkers and the tests share.
- :mod:`specs.exhaustive`: every operation from every state of a queue of up to N blocks.
- :mod:`specs.contracts`: CrossHair contracts relating the queue to the model;
  :mod:`specs.crosshair_run` runs CrossHair on them and counts the paths it explored.
- :mod:`specs.proof`: the all-sizes proof (z3) of the queue's public methods and of the walk
  its iterators return, a package: the symbolic heap, the translator of the queue's source,
  the model's cases, the loop invariants, the obligations and the driver; and exhaustive
  checks on small queues (not proofs) of copying, pickling and the fault model.
- :mod:`specs.interrupts`: exceptions injected at every point where the interpreter may run
  a signal handler, the definition of a checkpoint the fault model and its tests share.
- :mod:`specs.trace_model`: the reference recorder the trace level is compared with.
- :mod:`specs.planted_bugs`: deliberately wrong queues that every checker must reject, one
  module per kind of defect.
- :mod:`specs.bug_matrix` and :mod:`specs.checker_matrix`: every verification layer against
  every planted bug (``docs/bug-matrix.md``, ``docs/checker-bug-matrix.md``), the layers
  defined once in :mod:`specs.layer_matrix`.

``python -I specs/__main__.py TOOL`` runs a tool of specs/ against the installed wheel.
"""
