"""The SAC builder: n-step transitions under a replay ratio, a k-step scanned learner."""

from __future__ import annotations

import jax

from shoal.agents.sac import learning
from shoal.agents.sac.config import SACConfig
from shoal.agents.sac.networks import SACNetworks, check_action_space, make_networks
from shoal.agents.sac.presets import PRESETS
from shoal.agents.transition_replay import TransitionReplayBuilder
from shoal.core.counting import Counter
from shoal.core.interfaces import Dataset
from shoal.core.loggers import Logger
from shoal.core.specs import EnvironmentSpec
from shoal.core.timing import Stopwatch
from shoal.core.types import Policy
from shoal.learners import ReplicatedLearner
from shoal.replay.contract import ReplayClient


class SACBuilder(TransitionReplayBuilder):
    """Soft actor-critic for continuous (Box) actions."""

    name = "sac"
    presets = PRESETS  # (as a plug-in declares its own)

    config: SACConfig
    # The loss seam: ``learning.Loss``, a plain function ``(networks, params, target_critic_params,
    # batch, rng, config) -> (loss, metrics)``, ``params`` the policy's, the critics' and the
    # temperature's. A SAC variant sets its own (and subclasses the config); the state, the
    # optimizers, the target critics, the update step and sharding stay SAC's.
    loss = staticmethod(learning.sac_loss)

    def __init__(self, config: SACConfig) -> None:
        super().__init__(config)

    def validate(self, spec: EnvironmentSpec, num_devices: int) -> None:
        check_action_space(spec)  # discrete or unbounded action spaces
        if spec.action_mask is not None:
            raise ValueError(
                "sac does not read an action_mask of continuous actions (their entries in use: "
                "agents of different action sizes); ppo does"
            )
        super().validate(spec, num_devices)
        if self.config.log_std_min >= self.config.log_std_max:
            raise ValueError(
                f"log_std_min={self.config.log_std_min} must be below log_std_max={self.config.log_std_max}"
            )

    def make_networks(self, spec: EnvironmentSpec) -> SACNetworks:
        c = self.config
        return make_networks(spec, c.hidden_sizes, c.log_std_min, c.log_std_max)

    def make_policy(self, networks: SACNetworks, spec: EnvironmentSpec, evaluation: bool) -> Policy:
        return learning.make_policy(networks, evaluation)

    def init_state(self, key: jax.Array, networks: SACNetworks) -> learning.TrainingState:
        return learning.init_state(key, networks, self.config)

    def make_learner(
        self,
        key: jax.Array,
        networks: SACNetworks,
        dataset: Dataset,
        logger: Logger | None = None,
        counter: Counter | None = None,
        replay_client: ReplayClient | None = None,
        stopwatch: Stopwatch | None = None,
    ) -> ReplicatedLearner:
        state = self.init_state(key, networks)
        return ReplicatedLearner(
            state,
            learning.make_update(networks, self.config, self.loss),
            dataset,
            counter=counter,
            logger=logger,
            stopwatch=stopwatch,
        )
