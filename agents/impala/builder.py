"""The IMPALA builder: env sequences into a dropping FIFO, a V-trace learner."""

from __future__ import annotations

import jax

from shoal.agents.builders import AgentBuilder, ExtrasSpec, extras_of
from shoal.agents.components.policy_lag import PolicyLag
from shoal.agents.components.torsos import check_torso
from shoal.agents.impala import learning
from shoal.agents.impala.config import IMPALAConfig
from shoal.agents.impala.networks import IMPALANetworks, make_networks
from shoal.agents.impala.presets import PRESETS
from shoal.core.counting import Counter
from shoal.core.interfaces import Adder, Dataset
from shoal.core.loggers import Logger
from shoal.core.specs import EnvironmentSpec
from shoal.core.timing import Stopwatch
from shoal.core.types import Policy, Sample
from shoal.learners import ReplicatedLearner
from shoal.replay import SequenceAdder, make_dropping_fifo_table, sequence_batches, sequence_signature
from shoal.replay.contract import ReplayClient
from shoal.replay.layouts import sequence_example

TABLE = "sequences"


def discrete_actions(spec: EnvironmentSpec) -> int:
    """The number of actions of ``spec``'s discrete action space (one-line ``ValueError`` for any other)."""
    if spec.num_actions is None:
        raise ValueError(
            f"IMPALA here takes a discrete action space; this environment's is "
            f"{spec.action_space} (for continuous actions use --agent ppo or sac)"
        )
    return spec.num_actions


class IMPALABuilder(AgentBuilder):
    """Actors never wait for the learner; each sequence is trained on at most once."""

    name = "impala"
    presets = PRESETS  # (as a plug-in declares its own)

    config: IMPALAConfig
    # The loss seam: ``learning.Loss``, a plain function ``(network, params, batch, rng, config) ->
    # (loss, metrics)``. An IMPALA variant sets its own (and subclasses the config); the state,
    # optimizer, update step and sharding stay IMPALA's.
    loss = staticmethod(learning.impala_loss)

    def __init__(self, config: IMPALAConfig) -> None:
        super().__init__(config)

    def validate(self, spec: EnvironmentSpec, num_devices: int) -> None:
        c = self.config
        discrete_actions(spec)
        check_torso(c.torso, spec=spec)
        super().validate(spec, num_devices)
        if c.sequences_per_update % spec.num_envs:
            raise ValueError(
                f"sequences_per_update={c.sequences_per_update} must be a multiple of "
                f"num_envs={spec.num_envs} (a replay item holds one sequence per env; a "
                "PettingZoo env's envs are its rows, --num-envs copies x agents)"
            )
        if c.sequences_per_update % num_devices:
            raise ValueError(
                f"sequences_per_update={c.sequences_per_update} must be a multiple of "
                f"the number of local devices ({num_devices})"
            )
        if c.queue_capacity * spec.num_envs < c.sequences_per_update:
            raise ValueError(
                f"queue_capacity={c.queue_capacity} items cannot hold one update's {c.sequences_per_update} sequences"
            )

    def env_steps_before_learning(self, spec: EnvironmentSpec) -> int:
        return self.config.rollout_length * self.config.sequences_per_update

    def _items_per_update(self, spec: EnvironmentSpec) -> int:
        return self.config.sequences_per_update // spec.num_envs

    def make_networks(self, spec: EnvironmentSpec) -> IMPALANetworks:
        return make_networks(spec, self.config.hidden_sizes, self.config.torso)

    def make_policy(self, networks: IMPALANetworks, spec: EnvironmentSpec, evaluation: bool) -> Policy:
        return learning.make_policy(networks.network, discrete_actions(spec), evaluation, self.config.eval_sample)

    def extras_spec(self, spec: EnvironmentSpec) -> ExtrasSpec:
        """The acting policy's logits and params version (what V-trace corrects with)."""
        return learning.extras_spec(discrete_actions(spec))

    def make_replay_tables(self, spec: EnvironmentSpec, extras: ExtrasSpec | None = None) -> list:
        signature = sequence_signature(spec, extras_of(extras, self, spec), self.config.rollout_length)
        return [make_dropping_fifo_table(TABLE, signature, self.config.queue_capacity)]

    def make_dataset_iterator(self, replay_client: ReplayClient, spec: EnvironmentSpec) -> Dataset:
        return sequence_batches(replay_client, TABLE, num_envs=spec.num_envs, num_items=self._items_per_update(spec))

    def example_batch(self, spec: EnvironmentSpec, extras: ExtrasSpec | None = None) -> Sample:
        return sequence_example(
            spec, extras_of(extras, self, spec), self.config.sequences_per_update, self.config.rollout_length
        )

    def make_adder(
        self,
        replay_client: ReplayClient,
        spec: EnvironmentSpec,
        extras: ExtrasSpec | None = None,
    ) -> Adder:

        return SequenceAdder(replay_client, TABLE, spec, self.config.rollout_length)

    def init_state(self, key: jax.Array, networks: IMPALANetworks) -> learning.TrainingState:
        return learning.init_state(key, networks, self.config)

    def make_learner(
        self,
        key: jax.Array,
        networks: IMPALANetworks,
        dataset: Dataset,
        logger: Logger | None = None,
        counter: Counter | None = None,
        replay_client: ReplayClient | None = None,
        stopwatch: Stopwatch | None = None,
    ) -> ReplicatedLearner:
        """The learner (it logs each batch's policy lag, which V-trace corrects for)."""
        state = self.init_state(key, networks)
        update = learning.make_update(networks.network, self.config, self.loss, key)
        return ReplicatedLearner(
            state, update, dataset, keep_batch=PolicyLag(), counter=counter, logger=logger, stopwatch=stopwatch
        )
