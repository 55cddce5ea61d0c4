"""gymnax-blines' MinAtar Breakout setting, for controlled runs beside its published PPO figure.

Two pieces, each usable alone through Shoal's doors for your own env and agent:

* ``GymnaxBreakout-v0``: gymnax's ``Breakout-MinAtar`` (the env behind gymnax-blines' returns: no
  sticky actions, three actions, episodes cut at 1,000 steps) as a gymnasium env, registered when
  this module is imported (``--env gymnax_blines:GymnaxBreakout-v0``). Observations are the
  bool ``[10, 10, 4]`` planes MinAtar's own gym wrapper gives, so Shoal's MinAtar torso reads
  them alike; the 1,000-step cut is a truncation.
* ``BlinesPPO``: Shoal's PPO with gymnax-blines' ``Categorical-MLP`` network as its code has it
  (``--agent gymnax_blines:BlinesPPO --set hidden_sizes=256,256``): the planes flattened into two
  separate ReLU MLPs, flax's default kernel init and biases uniform in ``[0, 0.05)``. Shoal's own
  ``torso=mlp activation=relu orthogonal_init=false`` is the same network with biases at 0.
  gymnax-blines' loss also clips the value loss (its ``clip_eps``, 0.2, as for the ratio): add
  ``--set clip_value_loss=true`` for its PPO as its code has it.

gymnax is not a Shoal dependency. Its wheel asks for a newer JAX than the Python 3.11 stack's,
and the env runs on that stack's JAX, so install it without its dependencies (it needs flax,
which Shoal installs)::

    pip install --no-deps "gymnax==1.0.1"
    PYTHONPATH=benchmarks python benchmarks/solve.py --agents ppo --envs gymnax_blines:GymnaxBreakout-v0 \\
        --seeds 0 --max-env-steps 1280000 --out OUT -- --preset minatar

gymnax's env steps one jitted call at a time here (about 0.6 ms a step on a 2-core CPU: 75% of a
1.28M-step PPO run's 1,059 s), where MinAtar's NumPy env takes a few microseconds: the same game
(stepped side by side from the same start with the same actions, the two give the same frames,
rewards and ends), for checking a result on gymnax's own code.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import gymnasium as gym
import jax.numpy as jnp
import numpy as np

from shoal.agents.components.networks import ActorCriticNetworks
from shoal.agents.ppo.builder import PPOBuilder
from shoal.agents.ppo.config import PPOConfig


class GymnaxBreakout(gym.Env):
    """gymnax's ``Breakout-MinAtar`` with gymnasium's API (seeded by ``reset(seed=...)``)."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self) -> None:
        import jax
        from gymnax.environments.minatar.breakout import MinBreakout

        env = MinBreakout()
        params = env.default_params
        self.observation_space = gym.spaces.Box(0, 1, (10, 10, 4), dtype=bool)
        self.action_space = gym.spaces.Discrete(env.num_actions)

        def step(key, state, action):
            obs, state, reward, terminated, _ = env.step_env(key, state, action, params)
            return obs, state, reward, terminated, env.is_truncated(state, params)

        self._jax = jax
        self._step = jax.jit(step)
        self._reset = jax.jit(lambda key: env.reset_env(key, params))
        self._key = jax.random.PRNGKey(0)
        self._state = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self._key = self._jax.random.PRNGKey(seed)
        self._key, key = self._jax.random.split(self._key)
        obs, self._state = self._reset(key)
        return np.asarray(obs, dtype=bool), {}

    def step(self, action):
        self._key, key = self._jax.random.split(self._key)
        obs, self._state, reward, terminated, truncated = self._step(key, self._state, int(action))
        terminated = bool(terminated)
        return np.asarray(obs, dtype=bool), float(reward), terminated, bool(truncated) and not terminated, {}


class ReluMLP(nn.Module):
    """``[batch, ...] -> [batch, output_size]``: ReLU hidden layers, as gymnax-blines' MLPs."""

    hidden_sizes: tuple[int, ...]
    output_size: int

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        x = x.reshape(x.shape[0], -1).astype(jnp.float32)
        for size in self.hidden_sizes:
            x = nn.relu(nn.Dense(size, bias_init=nn.initializers.uniform(0.05))(x))
        return nn.Dense(self.output_size, bias_init=nn.initializers.uniform(0.05))(x)


class SeparateReluActorCritic(nn.Module):
    """``observation -> (logits, value)``: a ReLU MLP each (gymnax-blines' ``CategoricalSeparateMLP``)."""

    hidden_sizes: tuple[int, ...]
    num_actions: int

    def setup(self) -> None:
        self.policy = ReluMLP(self.hidden_sizes, self.num_actions)
        self.value = ReluMLP(self.hidden_sizes, 1)

    def __call__(self, observation: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
        return self.policy(observation), self.value(observation)[:, 0]

    def logits(self, observation: jnp.ndarray) -> jnp.ndarray:
        return self.policy(observation)


class BlinesPPO(PPOBuilder):
    """Shoal's PPO (its config, learner and presets) with gymnax-blines' network; discrete actions."""

    name = "ppo-blines"
    config: PPOConfig

    def make_networks(self, spec):
        if spec.num_actions is None:
            raise ValueError(f"BlinesPPO takes a discrete action space, got {spec.action_space}")
        network = SeparateReluActorCritic(tuple(self.config.hidden_sizes), spec.num_actions)
        return ActorCriticNetworks(network, spec.observation_shape, spec.num_actions)


gym.register("GymnaxBreakout-v0", entry_point=f"{__name__}:GymnaxBreakout")
