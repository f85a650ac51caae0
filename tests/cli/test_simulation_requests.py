"""A drawn request fits a quarter of the pool: kept whole when it fits, cut to fit when not.

The simulation caps each request at a quarter of the pool's token slots (at least two:
one prompt token, one output token), so that one request always fits once the others
are preempted. These tests script the random draws of one request to put it exactly at
the cap, just over it, far over it, and in the smallest pool, and check the cut.
"""

from __future__ import annotations

import io
import random
from collections.abc import Sequence

import pytest

from verified_queue.cli.simulation import MIN_CAPACITY, DemoConfig, Simulation

SEED = 7


class ScriptedDraws(random.Random):
    """Draws for one request: the first system prompt, no document, the given lengths."""

    def __new__(cls, own_text: int, output: int) -> ScriptedDraws:
        # Python 3.10's Random.__new__ takes the seed alone: it must not see these.
        del own_text, output
        return super().__new__(cls)

    def __init__(self, own_text: int, output: int) -> None:
        """Answer the request's two length draws with ``own_text`` then ``output``."""
        super().__init__(0)
        self.lengths = [own_text, output]

    def choice(self, seq: Sequence[object]) -> object:  # type: ignore[override]  # scripted
        """Pick the first system prompt."""
        return seq[0]

    def random(self) -> float:
        """Draw no document."""
        return 0.99

    def randint(self, a: int, b: int) -> int:
        """Return the next scripted length, which must lie in the range asked for."""
        length = self.lengths.pop(0)
        assert a <= length <= b
        return length


def _system_prompt_length() -> int:
    """The length of the first system prompt of a run with ``SEED``."""
    return len(
        Simulation(DemoConfig(blocks=3, block_size=1, seed=SEED), io.StringIO()).system_prompts[0]
    )


def _draw(cap: int, own_text: int, output: int) -> tuple[Simulation, list[int], int]:
    """Draw one scripted request in a pool of one-token blocks whose request cap is ``cap``.

    Returns the simulation, the request's prompt and its output length.
    """
    config = DemoConfig(blocks=4 * cap + 1, block_size=1, seed=SEED)
    simulation = Simulation(config, io.StringIO())
    assert simulation.max_request_tokens == max(MIN_CAPACITY, cap)
    simulation.rng = ScriptedDraws(own_text, output)
    request = simulation._new_request()
    assert request.num_prompt_tokens == len(request.token_ids)
    return simulation, request.token_ids, request.max_output_tokens


def test_a_request_exactly_at_the_cap_is_kept_whole() -> None:
    """A prompt and output that fill the cap exactly are not cut, a long output included."""
    system = _system_prompt_length()
    cap = system + 8 + 512
    assert cap // 4 < 512  # so a cut would shorten the output
    simulation, prompt, output = _draw(cap, own_text=8, output=512)
    assert output == 512
    assert len(prompt) == system + 8
    assert prompt[:system] == simulation.system_prompts[0]


def test_a_request_one_token_over_the_cap_is_cut_to_fill_it() -> None:
    """One token too many: the output, within a quarter of the cap, stays; the prompt loses one."""
    system = _system_prompt_length()
    cap = system + 100 + 49
    _, prompt, output = _draw(cap, own_text=100, output=50)
    assert output == 50
    assert len(prompt) + output == cap


@pytest.mark.parametrize("cap", [100, 61])
def test_a_long_output_is_cut_to_a_quarter_of_the_cap(cap: int) -> None:
    """An output longer than a quarter of the cap keeps that quarter; the prompt the rest."""
    simulation, prompt, output = _draw(cap, own_text=300, output=400)
    assert output == cap // 4
    assert len(prompt) + output == cap
    assert prompt == simulation.system_prompts[0][: len(prompt)]


def test_in_the_smallest_pool_a_request_is_one_prompt_token_and_one_output_token() -> None:
    """With room for two tokens, a request keeps one token of prompt and one of output."""
    config = DemoConfig(blocks=3, block_size=1, seed=SEED)
    simulation = Simulation(config, io.StringIO())
    simulation.rng = ScriptedDraws(8, 16)
    request = simulation._new_request()
    assert (request.num_prompt_tokens, request.max_output_tokens) == (1, 1)
    assert request.token_ids == simulation.system_prompts[0][:1]
