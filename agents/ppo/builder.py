"""The PPO builder: env sequences into a Reverb queue, an epochs x minibatches learner; discrete
or continuous (Box) actions."""

from __future__ import annotations

import jax

from shoal.agents.builders import AgentBuilder, ExtrasSpec, extras_of
from shoal.agents.components.networks import check_activation, check_actor_critic_actions
from shoal.agents.components.normalization import DiscountedReturns
from shoal.agents.components.policy_lag import PolicyLag
from shoal.agents.components.torsos import check_torso, is_image
from shoal.agents.ppo import acting, learning
from shoal.agents.ppo.config import PPOConfig, check_schedules
from shoal.agents.ppo.networks import PPONetworks, make_networks
from shoal.agents.ppo.presets import PRESETS
from shoal.core.counting import Counter
from shoal.core.interfaces import Adder, Dataset
from shoal.core.loggers import Logger
from shoal.core.specs import EnvironmentSpec
from shoal.core.timing import Stopwatch
from shoal.core.types import Policy, Sample
from shoal.learners import ReplicatedLearner
from shoal.replay import SequenceAdder, make_queue_table, sequence_batches, sequence_signature
from shoal.replay.contract import ReplayClient
from shoal.replay.layouts import sequence_example

TABLE = "rollouts"


class PPOBuilder(AgentBuilder):
    """On-policy PPO: each rollout is trained on once (for ``num_epochs`` passes), in order."""

    name = "ppo"
    presets = PRESETS  # (as a plug-in declares its own)
    on_policy = True

    config: PPOConfig
    # The loss seam: ``learning.Loss``, a plain function ``(networks, params, minibatch, rng, config,
    # clip_epsilon) -> (loss, metrics)``. A PPO variant sets its own (and subclasses the config);
    # the state, optimizer, schedules, update step and sharding stay PPO's.
    loss = staticmethod(learning.ppo_loss)

    def __init__(self, config: PPOConfig) -> None:
        super().__init__(config)

    def validate(self, spec: EnvironmentSpec, num_devices: int) -> None:
        c = self.config
        check_torso(c.torso, also=("mlp",), spec=spec)
        if c.torso == "mlp" and (spec.num_actions is None or c.lstm_size or spec.dict_observations):
            raise ValueError(
                "torso=mlp reads frames with a categorical, feed-forward policy: not with continuous "
                "actions, lstm_size or a Dict observation (use torso=auto there)"
            )
        check_activation(c.activation)
        mlps = not (c.lstm_size or spec.dict_observations or (is_image(spec) and c.torso != "mlp"))
        changed = [f"activation={c.activation}"] * (c.activation != "tanh") + ["orthogonal_init=false"] * (
            not c.orthogonal_init
        )
        if changed and not mlps:
            raise ValueError(
                f"{' and '.join(changed)} set the feed-forward MLPs (hidden_sizes); this network has "
                "none: lstm_size, a Dict observation or a convolutional torso (for frames, torso=mlp "
                "reads them with the MLPs)"
            )
        check_actor_critic_actions(spec, "PPO", continuous=True)
        super().validate(spec, num_devices)
        check_schedules(c)  # (after the ranges: schedule_env_steps is a whole number >= 0)
        rows = c.rollouts_per_update * spec.num_envs
        if rows % num_devices:
            raise ValueError(
                f"rollouts_per_update x num_envs = {rows} env sequences per update must "
                f"be a multiple of the number of local devices ({num_devices})"
            )
        if c.lstm_size and (rows // num_devices) % c.num_minibatches:
            raise ValueError(
                f"num_minibatches={c.num_minibatches} must divide the {rows // num_devices} env "
                f"sequences per update on each of {num_devices} device(s) (rollouts_per_update x "
                "num_envs / devices): recurrent PPO (lstm_size > 0) trains on whole sequences"
            )
        if not c.lstm_size and c.rollout_length % c.num_minibatches:
            raise ValueError(f"num_minibatches={c.num_minibatches} must divide rollout_length={c.rollout_length}")
        if c.queue_capacity < c.rollouts_per_update:
            raise ValueError(
                f"queue_capacity={c.queue_capacity} is below "
                f"rollouts_per_update={c.rollouts_per_update}: no update could ever run"
            )

    def env_steps_before_learning(self, spec: EnvironmentSpec) -> int:
        return self.config.rollout_length * self.config.rollouts_per_update * spec.num_envs

    def make_networks(self, spec: EnvironmentSpec) -> PPONetworks:
        c = self.config
        return make_networks(
            spec, c.hidden_sizes, c.initial_log_std, c.torso, c.lstm_size, c.activation, c.orthogonal_init
        )

    def make_policy(self, networks: PPONetworks, spec: EnvironmentSpec, evaluation: bool) -> Policy:
        return acting.make_policy(networks, self.config, evaluation)

    def extras_spec(self, spec: EnvironmentSpec) -> ExtrasSpec:
        """The acting policy's log-probability and params version, its recurrent state (recurrent
        PPO) and, with reward normalization, the discounted return the adder adds."""
        return acting.extras_spec(self.config)

    def make_replay_tables(self, spec: EnvironmentSpec, extras: ExtrasSpec | None = None) -> list:
        signature = sequence_signature(spec, extras_of(extras, self, spec), self.config.rollout_length)
        return [make_queue_table(TABLE, signature, self.config.queue_capacity)]

    def make_dataset_iterator(self, replay_client: ReplayClient, spec: EnvironmentSpec) -> Dataset:
        return sequence_batches(replay_client, TABLE, num_envs=spec.num_envs, num_items=self.config.rollouts_per_update)

    def example_batch(self, spec: EnvironmentSpec, extras: ExtrasSpec | None = None) -> Sample:
        return sequence_example(
            spec,
            extras_of(extras, self, spec),
            self.config.rollouts_per_update * spec.num_envs,
            self.config.rollout_length,
        )

    def make_adder(
        self,
        replay_client: ReplayClient,
        spec: EnvironmentSpec,
        extras: ExtrasSpec | None = None,
    ) -> Adder:

        adder = SequenceAdder(replay_client, TABLE, spec, self.config.rollout_length)
        if self.config.normalize_rewards:  # each env's discounted return, for the reward scale
            return DiscountedReturns(adder, spec.num_envs, self.config.discount)
        return adder

    def init_state(self, key: jax.Array, networks: PPONetworks) -> learning.TrainingState:
        return learning.init_state(key, networks, self.config)

    def make_learner(
        self,
        key: jax.Array,
        networks: PPONetworks,
        dataset: Dataset,
        logger: Logger | None = None,
        counter: Counter | None = None,
        replay_client: ReplayClient | None = None,
        stopwatch: Stopwatch | None = None,
    ) -> ReplicatedLearner:
        """The learner; it drops rollouts acted with params more than ``max_policy_lag`` updates
        old (``shoal.agents.components.policy_lag``)."""
        state = self.init_state(key, networks)
        return ReplicatedLearner(
            state,
            learning.make_update(networks, self.config, self.loss),
            dataset,
            keep_batch=PolicyLag(self.config.max_policy_lag, counter),
            counter=counter,
            logger=logger,
            stopwatch=stopwatch,
        )
