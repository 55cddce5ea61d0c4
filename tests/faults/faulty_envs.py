"""Environments that fail on purpose, registered on import: use them as
``--env tests.faults.faulty_envs:RaisesInStep-v0`` (gymnasium's module:id syntax)."""

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

FAIL_AFTER = 200  # steps of one env


class RaisesInStep(CartPoleEnv):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._steps = 0

    def step(self, action):
        self._steps += 1
        if self._steps > FAIL_AFTER:
            raise RuntimeError("the simulator lost its connection")
        return super().step(action)


class NaNObservations(RaisesInStep):
    def step(self, action):
        self._steps += 1
        obs, reward, terminated, truncated, info = CartPoleEnv.step(self, action)
        if self._steps > FAIL_AFTER:
            obs = np.full_like(obs, np.nan)
        return obs, reward, terminated, truncated, info


class HugeRewards(CartPoleEnv):
    """CartPole whose every reward is ``reward``: 1e308 (two of them overflow a float), or inf."""

    def __init__(self, reward=1e308, **kwargs):
        super().__init__(**kwargs)
        self._reward = reward

    def step(self, action):
        obs, _, terminated, truncated, info = super().step(action)
        return obs, self._reward, terminated, truncated, info


class MaskedCartPole(CartPoleEnv):
    """CartPole that gives ``mask`` (as it is given: floats, large ints) as its action mask, in its
    info, or with ``key`` as the ``action_mask`` key of a Dict observation (``MultiBinary``)."""

    def __init__(self, mask=(1, 0), key=False, **kwargs):
        super().__init__(**kwargs)
        self._mask, self._key = np.asarray(mask), key
        if key:
            self.observation_space = gym.spaces.Dict(
                {"observation": self.observation_space, "action_mask": gym.spaces.MultiBinary(2)}
            )

    def _give(self, obs, info):
        if self._key:
            return {"observation": obs, "action_mask": self._mask.copy()}, info
        return obs, {**info, "action_mask": self._mask.copy()}

    def reset(self, **kwargs):
        return self._give(*super().reset(**kwargs))

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        obs, info = self._give(obs, info)
        return obs, reward, terminated, truncated, info


class KeyedCartPole(CartPoleEnv):
    """CartPole whose observation is a Dict keyed by ``keys`` (``[x, x_dot]`` under the first,
    ``[theta, theta_dot]`` under the second): ints, tuples, what a user's env may have."""

    def __init__(self, keys=(0, 1), **kwargs):
        super().__init__(**kwargs)
        self._keys = tuple(tuple(k) if isinstance(k, list) else k for k in keys)
        box = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.observation_space = gym.spaces.Dict({key: box for key in self._keys})

    def _observe(self, state):
        return {self._keys[0]: state[:2].astype(np.float32), self._keys[1]: state[2:].astype(np.float32)}

    def reset(self, **kwargs):
        state, info = super().reset(**kwargs)
        return self._observe(state), info

    def step(self, action):
        state, reward, terminated, truncated, info = super().step(action)
        return self._observe(state), reward, terminated, truncated, info


class BadFrames(CartPoleEnv):
    """CartPole whose ``render()`` gives frames a video cannot take (``frames``): ``"resize"``,
    uint8 RGB frames that halve in size after the first three; ``"float"``, float frames in [0, 1]."""

    def __init__(self, frames="resize", render_mode=None, **kwargs):
        super().__init__(render_mode=render_mode, **kwargs)
        self._frames, self._renders = frames, 0

    def render(self):
        self._renders += 1
        if self._frames == "float":
            return np.full((40, 60, 3), 0.5, np.float32)
        return np.zeros((40, 60, 3) if self._renders <= 3 else (20, 30, 3), np.uint8)


for name, cls, kwargs in (
    ("BadFrames-v0", BadFrames, {}),
    ("KeyedCartPole-v0", KeyedCartPole, {}),
    ("MaskedCartPole-v0", MaskedCartPole, {}),
    ("RaisesInStep-v0", RaisesInStep, {}),
    ("NaNObservations-v0", NaNObservations, {}),
    ("HugeRewards-v0", HugeRewards, {}),
    ("InfiniteRewards-v0", HugeRewards, {"reward": float("inf")}),
):
    if name not in gym.registry:
        gym.register(name, entry_point=cls, max_episode_steps=500, reward_threshold=475.0, kwargs=kwargs)


class WiderCartPole(CartPoleEnv):
    """CartPole with a fifth observation, always 0."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        high = np.concatenate([self.observation_space.high, [1.0]]).astype(np.float32)
        self.observation_space = gym.spaces.Box(-high, high, dtype=np.float32)

    def reset(self, **kwargs):
        obs, info = super().reset(**kwargs)
        return np.append(obs, 0.0).astype(np.float32), info

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return np.append(obs, 0.0).astype(np.float32), reward, terminated, truncated, info


class Endless(gym.Env):
    """An env whose episodes never end (registered with no time limit): reward 1 a step."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 1.0, False, False, {}


if "Endless-v0" not in gym.registry:
    gym.register("Endless-v0", entry_point=Endless)


def cartpole_per_process(**kwargs):
    """An env factory that builds another env in a node's process (``SHOAL_NODE_START`` is set
    there) than in the driver's: a wider observation."""
    import os

    return WiderCartPole(**kwargs) if os.environ.get("SHOAL_NODE_START") else CartPoleEnv(**kwargs)


def cartpole_beyond_the_first_process(marker: str, **kwargs):
    """An env factory that builds CartPole in the first process that calls it (the driver, which
    reads the run's spec; its pid goes into the file ``marker``) and a wider observation in
    every other process (a node's, under any launcher)."""
    import os

    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
    with open(marker) as f:
        first = f.read()
    return CartPoleEnv(**kwargs) if first == str(os.getpid()) else WiderCartPole(**kwargs)
