"""SAC in the compiled loop (``--agent sac --launcher anakin``, for a JAX env with a Box action
space such as ``gymnax:Pendulum-v1``): the envs, SAC's sampling policy, a replay buffer held on
the device (``anakin.buffer``, uniform) and SAC's own update in one program.

The loop is ``anakin.off_policy``'s (the ``k`` vector steps into the ring, then ``u`` SGD steps
on n-step transitions drawn from it, at SAC's replay ratio ``samples_per_insert``): SAC brings
its own policy (``builder.make_policy``: a sample of the tanh-Gaussian) and update
(``learning.make_update(networks, config, builder.loss)``: the same twin-critic, policy and
temperature losses, three Adams and Polyak target critics as the replay-backed learner; nothing
copied). For the defaults (16 envs, 16 SGD steps of 256 per update, a replay ratio of 256: one
SGD step per env step) ``k`` is 1 and ``u`` 16, exact.
"""

from __future__ import annotations

import jax

from shoal.agents.sac import learning
from shoal.agents.sac.builder import SACBuilder
from shoal.agents.sac.networks import SACNetworks
from shoal.envs.jax_vector import JaxVectorEnv
from shoal.launch.experiments.anakin.loop import Loop
from shoal.launch.experiments.anakin.off_policy import make_replay_loop


def make_loop(
    builder: SACBuilder,
    networks: SACNetworks,
    venv: JaxVectorEnv,
    num_devices: int,
    train_key: jax.Array,
    env_key: jax.Array,
    loop_key: jax.Array,
) -> Loop:
    """SAC's part of the compiled loop: its first carry (an empty ring) and its iteration."""
    c = builder.config
    return make_replay_loop(
        c,
        builder.init_state(train_key, networks),
        builder.make_policy(networks, venv.spec, evaluation=False),
        learning.make_update(networks, c, builder.loss),  # SAC's update, its loss seam included
        venv,
        num_devices,
        env_key,
        loop_key,
    )
