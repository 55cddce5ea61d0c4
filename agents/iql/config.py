"""IQL hyperparameters: BC's (``shoal.agents.bc.config``: the policy network, the optimizer, the
replay of single transitions) and IQL's own. The defaults are the paper's (Kostrikov, Nair &
Levine 2021: expectile 0.7 and beta 3.0 as for its MuJoCo tasks, weights clipped at 100, Polyak
step 0.005, discount 0.99, 256x256 networks, learning rate 3e-4); the ``classic`` preset's, tuned
for a CartPole-v1 dataset of 50k steps on a 2-core CPU, are in ``shoal.agents.iql.presets``."""

from __future__ import annotations

import dataclasses

from shoal.agents.bc.config import BCConfig
from shoal.core.settings import setting


@dataclasses.dataclass
class IQLConfig(BCConfig):
    """BC's settings -- ``learning_rate`` (each of the policy, the value and the critics has its
    own Adam), ``batch_size``, ``hidden_sizes`` (every network's), ``torso``,
    ``sgd_steps_per_update``, ``max_replay_size``, ``max_gradient_norm`` (each network's gradient
    clipped on its own) -- plus:

    Attributes:
      discount: gamma of the critics' one-step target ``r + gamma * (1 - terminated) * V(s')``.
      expectile: tau of the value's expectile regression, in (0, 1): 0.5 is the mean of the
        target critics' values under the data's actions, towards 1 their maximum.
      beta: the inverse temperature of the policy's weights ``exp(beta * (Q - V))``: 0 is BC.
      max_weight: the weights' clip.
      tau: Polyak step of the target critics, ``target <- tau * online + (1 - tau) * target``.
    """

    learning_rate: float = setting(3e-4, low=0.0, low_open=True, high=1.0)
    discount: float = setting(0.99, low=0.0, high=1.0)
    expectile: float = setting(0.7, low=0.0, low_open=True, high=1.0, high_open=True)
    beta: float = setting(3.0, low=0.0, high=1_000.0)
    max_weight: float = setting(100.0, low=0.0, low_open=True, high=1e9)
    tau: float = setting(0.005, low=0.0, low_open=True, high=1.0)
