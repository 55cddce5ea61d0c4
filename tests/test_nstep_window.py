"""The n-step adder's windowed arrays give exactly ``n_step_transition``'s transitions (episode
ends inside the window, at its last step, none), for n = 1..5, at a fixed seed."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from shoal.core.types import Step
from shoal.replay.adders import _n_step_from_window, _powers, n_step_transition


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_window_equals_the_reference(n: int) -> None:
    rng = np.random.default_rng(n)
    steps: collections.deque = collections.deque(maxlen=n)
    flags = np.zeros((3, n, 6))
    ends_inside = 0
    for _ in range(300):
        obs = rng.random((6, 3)).astype(np.float32)
        step = Step(
            obs,
            rng.integers(0, 2, 6),
            rng.normal(size=6).astype(np.float32),
            rng.random(6) < 0.2,
            rng.random(6) < 0.1,
            obs + 1,
            {},
        )
        steps.append(step)
        flags[:, :-1] = flags[:, 1:]  # (as NStepTransitionAdder.add moves its window)
        flags[0, -1], flags[1, -1] = step.reward, step.terminated
        np.logical_or(step.terminated, step.truncated, out=flags[2, -1])
        if len(steps) < n:
            continue
        ends_inside += bool(flags[2, :-1].any())
        want, got = n_step_transition(steps, 0.97), _n_step_from_window(steps, flags, _powers(0.97, n))
        assert want.keys() == got.keys()
        for key in want:
            assert want[key].dtype == got[key].dtype and np.array_equal(want[key], got[key]), key
    assert n == 1 or ends_inside > 50  # (the slow path was taken)
