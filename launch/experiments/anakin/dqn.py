"""DQN in the compiled loop (``--agent dqn --launcher anakin``): the envs, epsilon-greedy acting,
a replay buffer held on the device (``anakin.buffer``) and DQN's own update in one program.

The loop is ``anakin.off_policy``'s (the ``k`` vector steps into the ring, then ``u`` SGD steps
on n-step transitions drawn from it, at DQN's replay ratio ``samples_per_insert``): DQN brings
its own policy (``builder.make_policy``: epsilon-greedy, epsilon linear in the env steps over
all envs) and update (``learning.make_update(q_network, config, builder.loss)``: the same loss,
double-Q target, optimizer and target network as the replay-backed learner). For the defaults
(16 envs, 8 SGD steps of 64 per update, a replay ratio of 32) ``k`` is 1 and ``u`` 8, exact.
With ``prioritized_replay`` the ring draws windows in proportion to ``priority **
priority_exponent`` (``anakin.buffer``), the update weighs them by DQN's importance weights, and
the drawn windows' priorities become their ``|TD|`` (the update's ``aux``).
"""

from __future__ import annotations

from typing import Any

import jax

from shoal.agents.dqn import learning
from shoal.agents.dqn.builder import DQNBuilder
from shoal.envs.jax_vector import JaxVectorEnv
from shoal.launch.experiments.anakin.loop import Loop
from shoal.launch.experiments.anakin.off_policy import (
    PRIORITY_FLOOR,
    SPECS,
    make_replay_loop,
    n_step_transitions,
    steps_and_updates,
)
from shoal.launch.experiments.anakin.off_policy import ReplayCarry as DQNCarry

__all__ = ["PRIORITY_FLOOR", "SPECS", "DQNCarry", "make_loop", "n_step_transitions", "steps_and_updates"]


def make_loop(
    builder: DQNBuilder,
    networks: Any,
    venv: JaxVectorEnv,
    num_devices: int,
    train_key: jax.Array,
    env_key: jax.Array,
    loop_key: jax.Array,
) -> Loop:
    """DQN's part of the compiled loop: its first carry (an empty ring) and its iteration."""
    c = builder.config
    return make_replay_loop(
        c,
        builder.init_state(train_key, networks),
        builder.make_policy(networks, venv.spec, evaluation=False),
        learning.make_update(networks.q_network, c, builder.loss),  # DQN's update, its loss seam included
        venv,
        num_devices,
        env_key,
        loop_key,
        c.priority_exponent if c.prioritized_replay else None,
    )
