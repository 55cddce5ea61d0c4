"""A cheap pixel task for tests: which half of the image is lit?

Observations are stacks of 4 identical 36x36 uint8 frames (rank 3, uint8: agents give it a
convolutional torso) with a bright square in the left or the right half. Action 0 says left,
1 right; a right answer earns 5 (more than 1: a run that clips its training rewards still
reports the unclipped return), a wrong one 0. Episodes last 8 steps: a random policy averages
20, a perfect one 40.
"""

import gymnasium as gym
import numpy as np

SIZE, STEPS, REWARD = 36, 8, 5.0


class LitSide(gym.Env):
    observation_space = gym.spaces.Box(0, 255, (4, SIZE, SIZE), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def _observe(self):
        frame = np.zeros((SIZE, SIZE), np.uint8)
        left = 2 + (0 if self._side == 0 else SIZE // 2)
        frame[12:24, left : left + 12] = 255
        return np.repeat(frame[None], 4, axis=0)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t, self._side = 0, int(self.np_random.integers(2))
        return self._observe(), {}

    def step(self, action):
        reward = REWARD if int(action) == self._side else 0.0
        self._t += 1
        self._side = int(self.np_random.integers(2))
        return self._observe(), reward, False, self._t >= STEPS, {}


gym.register("LitSide-v0", entry_point=LitSide)
