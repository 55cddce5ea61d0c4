"""A plug-in agent for the ONNX export tests: DQN whose greedy policy passes its actions through
a host callback (``jax.pure_callback``), which JAX runs and no ONNX model can hold."""

import jax
import numpy as np

from shoal.agents.dqn import DQNBuilder
from shoal.core.types import Policy


class CallbackDQN(DQNBuilder):
    """DQN, its actions handed to Python and back (the same actions)."""

    def make_policy(self, networks, spec, evaluation):
        inner = super().make_policy(networks, spec, evaluation)

        def apply(params, key, observation, info):
            actions, extras, key = inner.apply(params, key, observation, info)
            shape = jax.ShapeDtypeStruct(actions.shape, actions.dtype)
            return jax.pure_callback(np.asarray, shape, actions), extras, key

        return Policy(apply, inner.extras_spec)
