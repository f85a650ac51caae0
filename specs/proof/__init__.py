"""A proof, for queues of every size, of the production queue's public methods.

The bounded layers (the exhaustive check, the CrossHair contracts) stop at 7 or 8 blocks. This
package proves with the z3 SMT solver, for every queue length ``n >= 0`` (and every batch
length) at once, that ``popleft``, ``remove``, ``append``, ``popleft_n``, ``append_n``,
``prepend_n``, the constructor, ``__len__``, ``__bool__``, ``__contains__``,
``get_all_free_blocks``, ``__iter__`` and ``iter_blocks_after`` of
:class:`~verified_queue.FreeBlockQueue`, and each step of the live walk (``_walk``) the last
two return (:mod:`specs.proof.walks`),

* preserve the invariants I1 to I4 of ``verified_queue/queue.py``,
* act on the sequence of blocks exactly as :class:`specs.model.ListModel` does: the same
  result, the same exception class (compared with ``is``, so a subclass is a difference),
  the same new sequence and count,
* leave every link and the count exactly as they were when they raise (for a refused batch,
  after the undo of the blocks already linked) and when they only read,
* touch no block outside the queue except those they are given, and
* never read or write a link of ``None`` nor index a list out of range, so the
  ``except (AttributeError, TypeError)`` handlers around the link reads, and the
  ``InvariantViolation`` paths for a sentinel whose link outside code destroyed, are
  unreachable on a healthy queue.

Two parts the translator cannot express are checked exhaustively on small queues instead,
and reported as such, never as proved (:mod:`specs.proof.bounded`): the copy and pickle round
trip (``__reduce__``, ``__setstate__``, ``__copy__``), and the fault model (an exception at
every combination of checkpoints up to the promised depth).

The heap is symbolic: ``next_free_block`` and ``prev_free_block`` are two z3 arrays from nodes
to nodes (``None`` is one more node), the count is an integer. A ghost array ``at`` lists the
queue's nodes (``at[0]`` the head sentinel, ``at[1..n]`` the model's list, ``at[n + 1]`` the
tail), and ``pos`` is its inverse (``-1`` off the chain); the invariants are quantified
formulas over them (:func:`invariants`).

The operations are not retyped here. :class:`Translator` reads the methods' source with
:mod:`ast` and executes it symbolically: attribute reads and writes of the two links become
array selects and stores, ``self.num_free_blocks`` an integer, ``if`` a fork of the path,
``try`` sends what the body raises to the matching handler, calls to the project's functions
are inlined (``raise f(...)``, where ``f`` provably only builds the exception, is not run: it
raises the one exception class ``f`` constructs, whatever ``f`` declares), and ``for`` and
``while`` loops are cut by the invariants of :data:`LOOP_INVARIANTS`, which z3 checks on
entry and across one round. A statement or expression it does not know raises
:class:`Unsupported`: nothing is skipped. So an edit to ``queue.py`` changes what is proved,
and a planted bug's method, translated the same way, fails the proof.

Not compared (docs/verification.md, "A proof for every size", says the same; each point is
how the translator works, not a limit of z3):

* exception messages: a builder is not run, so neither its text nor the block, operation or
  numbers it names are compared (the self-check, the exhaustive check and the contracts
  compare messages word for word);
* ``repr`` and check mode (``CheckedFreeBlockQueue``); copying, pickling and the fault model
  only to the bounds of :mod:`specs.proof.bounded`;
* whether ``popleft_n``'s list is a new object: its length and blocks are compared, not its
  identity;
* a walk whose block the caller moves into another queue between two steps (assumed to stay
  in this queue or be detached: :func:`specs.proof.walks.held`);
* interrupts and allocation points, in the proof: an exception arises only where the code
  raises one, and no code runs at an allocation. So the undo paths that only an asynchronous
  exception reaches (``popleft_n``'s handlers and :func:`verified_queue._undo.relink_taken`,
  the batch methods' two outer handlers' :func:`verified_queue._undo.finish_unstage`) are
  never entered, hence never translated (:func:`specs.proof.bounded.check_faults` runs them);
  the raise of ``popleft_n``'s second count test, which guards against a finalizer run by a
  garbage collection that ``[None] * count`` sets off, is on a path z3 finds infeasible; and
  no finalizer re-enters the queue;
* arguments of other types: a block is a block (a node other than ``None``; ``in`` and
  ``iter_blocks_after`` take any node, ``None`` included), a count an exact ``int``
  (``type(n) is int``), a batch an exact ``list`` of blocks; the ``WrongTypeError`` paths
  (``count_argument``, ``batch_argument``, ``not_a_block``) are not covered;
* a damaged or foreign heap: the queue satisfies I1 to I4 before the call, a block in no queue
  is detached, a block in another queue has both links set, another queue's sentinel exactly
  one, and ``remove`` and ``iter_blocks_after`` are not given a block linked in *another*
  queue (the documented precondition; check mode enforces it); the ``InvariantViolation``
  paths are proved unreachable from there, not compared on a damaged queue;
* termination of :func:`verified_queue._undo.unstage`'s walk back and of the ``while`` walks
  (loops are proved partially correct; the ``for`` loops end by construction), and threads;
* the compiled build: the proof reads ``queue.py``; that mypyc's C does the same is assumed
  (the test suite runs on both builds). Also assumed: Python's semantics of the statements
  the translator accepts (a list is a value with an identity, ``x.next_free_block`` a
  field), and z3's correctness.

The package's modules, in the order they build on each other:

* :mod:`~specs.proof.heap`: the ``Node`` sort, :class:`Heap`, :class:`Ghost`, the invariants,
  the lemmas and the frame;
* :mod:`~specs.proof.state`: what the translator works on (:class:`State`, its outcomes, the
  :class:`Obligation` it collects, the :class:`LoopView` a loop invariant sees);
* :mod:`~specs.proof.source`: where the translator finds a function's source, and which calls
  it inlines;
* :mod:`~specs.proof.translator`: :class:`Translator`, the symbolic executor;
* :mod:`~specs.proof.cases`: the list model's semantics per operation (:data:`OPERATIONS`);
* :mod:`~specs.proof.walks`: the steps of the live walk, and the invariant of its loop;
* :mod:`~specs.proof.loops`: :data:`LOOP_INVARIANTS`;
* :mod:`~specs.proof.goals`: the obligations of an operation, of the walk, and of the lemmas;
* :mod:`~specs.proof.bounded`: the exhaustive checks of copying and pickling and of the
  fault model (not proofs);
* :mod:`~specs.proof.driver`: z3 on each obligation, the bounded search for a
  counterexample, and the command line.

Run ``python -m specs.proof`` (``tox -e proof``) for a report with each operation's time.
"""

from specs.proof.bounded import BoundedReport, check_copy_and_pickle, check_faults
from specs.proof.cases import OPERATIONS, Case, Operation
from specs.proof.driver import (
    PROVED,
    Result,
    check,
    concrete_queue,
    find_counterexample,
    main,
    prove,
)
from specs.proof.goals import WALK, lemma_obligations, obligations, prove_operation
from specs.proof.heap import (
    HEAD,
    IS_SENTINEL,
    LINKED_ELSEWHERE,
    NODE,
    NONE,
    TAIL,
    Ghost,
    Heap,
    invariants,
    lemmas,
    symbolic_state,
)
from specs.proof.loops import LOOP_INVARIANTS, walk_back
from specs.proof.state import LoopSpec, LoopView, Obligation, Unsupported
from specs.proof.translator import Translator

__all__ = [
    "HEAD",
    "IS_SENTINEL",
    "LINKED_ELSEWHERE",
    "LOOP_INVARIANTS",
    "NODE",
    "NONE",
    "OPERATIONS",
    "PROVED",
    "TAIL",
    "WALK",
    "BoundedReport",
    "Case",
    "Ghost",
    "Heap",
    "LoopSpec",
    "LoopView",
    "Obligation",
    "Operation",
    "Result",
    "Translator",
    "Unsupported",
    "check",
    "check_copy_and_pickle",
    "check_faults",
    "concrete_queue",
    "find_counterexample",
    "invariants",
    "lemma_obligations",
    "lemmas",
    "main",
    "obligations",
    "prove",
    "prove_operation",
    "symbolic_state",
    "walk_back",
]
