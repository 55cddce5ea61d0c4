"""A Dict-observation task for tests: CartPole-v1 whose state is split into two keys, plus a
small uint8 image of the cart, and (``masked=True``) an ``action_mask`` key.

Observations: ``{"cart": [x, x_dot], "pole": [theta, theta_dot]`` (float32), ``"pixels": [1, 36,
36]`` uint8 (a bright column where the cart is; rank 3: agents give it a convolutional torso;
left out with ``pixels=False``, for cheaper runs)``}``.
With ``masked``, ``"action_mask": int8 [2]`` allows one action every third step only (the other
steps both): a policy that took a masked action would be caught by the env, which raises.
"""

import gymnasium as gym
import numpy as np

SIZE = 36


class DictCartPole(gym.Wrapper):
    def __init__(self, masked: bool = False, max_episode_steps: int = 500, pixels: bool = True) -> None:
        super().__init__(gym.make("CartPole-v1", max_episode_steps=max_episode_steps))
        self._masked, self._pixels, self._t = masked, pixels, 0
        spaces = {
            "cart": gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
            "pole": gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
        }
        if pixels:
            spaces["pixels"] = gym.spaces.Box(0, 255, (1, SIZE, SIZE), np.uint8)
        if masked:
            spaces["action_mask"] = gym.spaces.MultiBinary(2)
        self.observation_space = gym.spaces.Dict(spaces)
        self._mask = np.ones(2, np.int8)

    def _observe(self, state: np.ndarray) -> dict:
        pixels = np.zeros((1, SIZE, SIZE), np.uint8)
        column = int(np.clip((state[0] + 2.4) / 4.8 * (SIZE - 1), 0, SIZE - 1))
        pixels[0, :, column] = 255
        obs = {"cart": state[:2].astype(np.float32), "pole": state[2:].astype(np.float32)}
        if self._pixels:
            obs["pixels"] = pixels
        if self._masked:
            self._mask = np.ones(2, np.int8)
            if self._t % 3 == 2:  # one action only: the one that pushes the pole upright
                self._mask[int(state[2] < 0)] = 0
            obs["action_mask"] = self._mask.copy()
        return obs

    def reset(self, **kwargs):
        state, info = self.env.reset(**kwargs)
        self._t = 0
        return self._observe(state), info

    def step(self, action):
        if self._masked and not self._mask[int(action)]:
            raise RuntimeError(f"masked action {int(action)} taken at step {self._t}")
        state, reward, terminated, truncated, info = self.env.step(action)
        self._t += 1
        return self._observe(state), reward, terminated, truncated, info


gym.register("DictCartPole-v0", entry_point=DictCartPole, reward_threshold=475.0)


class DictPendulum(gym.ObservationWrapper):
    """Pendulum-v1 (continuous actions) whose observation is ``{"angle": [cos, sin], "speed": [w]}``."""

    def __init__(self) -> None:
        super().__init__(gym.make("Pendulum-v1"))
        self.observation_space = gym.spaces.Dict(
            {"angle": gym.spaces.Box(-1.0, 1.0, (2,), np.float32), "speed": gym.spaces.Box(-8.0, 8.0, (1,), np.float32)}
        )

    def observation(self, observation):
        return {"angle": observation[:2].astype(np.float32), "speed": observation[2:].astype(np.float32)}


gym.register("DictPendulum-v0", entry_point=DictPendulum)
