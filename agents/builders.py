"""``AgentBuilder``: an agent as a set of factories (after Acme's builders).

A builder is pure in ``(config, environment spec)``: every factory takes what it needs as
arguments, and no factory sets state another reads. The same builder serves the single-process
runner and the distributed program; each runner wires the pieces together:

    spec -> extras_spec -> make_replay_tables(spec, extras) -> Reverb server
    replay client -> make_dataset_iterator -> make_learner(networks) (a VariableSource)
    replay client -> make_adder -> make_actor(policy, variable_source = learner or an RPC client to it)
    spec -> make_networks -> make_policy (where it acts: actors, the evaluator)

The replay side needs no networks: ``extras_spec(spec)`` declares what the acting policy records
beside each action (and what the adder adds), so a driver that only starts a replay server
builds neither networks nor a policy.

Builders import ``shoal.replay`` (Reverb, TensorFlow) inside the factories that need it, so an
agent's networks, learning code and learner import and run where Reverb is not installed (a
GPU machine with current JAX).
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar, Mapping, Protocol

import jax

from shoal.actors.actor import BatchedActor
from shoal.actors.variable_client import VariableClient
from shoal.core.counting import Counter
from shoal.core.interfaces import Adder, Dataset, Learner, ReplayClient, TrainingActor, VariableSource
from shoal.core.loggers import Logger
from shoal.core.settings import check_settings
from shoal.core.specs import ArraySpec, EnvironmentSpec
from shoal.core.timing import Stopwatch
from shoal.core.types import Policy, Sample


ExtrasSpec = Mapping[str, ArraySpec]


class AgentConfig(Protocol):
    """What every agent's config (a documented dataclass of ``shoal.core.settings`` fields)
    has, because the base builder reads it."""

    variable_update_period: int  # vector steps between an actor's parameter pulls


def extras_of(spec_or_policy: ExtrasSpec | Policy | None, builder: "AgentBuilder", spec: EnvironmentSpec) -> ExtrasSpec:
    """The extras spec a replay factory was given: ``None`` -> ``builder.extras_spec(spec)``;
    a ``Policy`` (what earlier versions passed) -> the builder's own (the replay items'
    extras, which may hold more than the policy's, e.g. PPO's discounted return)."""
    if spec_or_policy is None or isinstance(spec_or_policy, Policy):
        return builder.extras_spec(spec)
    return spec_or_policy


class AgentBuilder(abc.ABC):
    """Builds one agent's parts from its ``config`` (an ``AgentConfig``: a documented dataclass).

    ``name`` is the agent's registry name (``shoal train --agent NAME``). ``on_policy``
    agents (PPO) need every rollout acted with the newest params: the single-process runner
    then lets the actor wait for each update; other agents act while the update runs, one
    update behind.
    """

    name: ClassVar[str]
    on_policy: ClassVar[bool] = False

    config: AgentConfig

    def __init__(self, config: AgentConfig) -> None:
        self.config = config

    def validate(self, spec: EnvironmentSpec, num_devices: int) -> None:
        """Raises ``ValueError`` (naming the bad value) if the agent cannot run on ``spec``:
        every config field against its range (``shoal.core.settings``), then what depends on
        the environment or on several fields (a subclass extends this)."""
        check_settings(self.config)

    @abc.abstractmethod
    def env_steps_before_learning(self, spec: EnvironmentSpec) -> int:
        """Env steps (over all of one actor's envs) before the learner's first update can run."""

    @abc.abstractmethod
    def make_networks(self, spec: EnvironmentSpec) -> Any:
        """The default networks (``ExperimentConfig.network_factory`` may replace them)."""

    @abc.abstractmethod
    def make_policy(self, networks: Any, spec: EnvironmentSpec, evaluation: bool) -> Policy:
        """The jittable policy for acting, or for evaluation if ``evaluation``."""

    @abc.abstractmethod
    def extras_spec(self, spec: EnvironmentSpec) -> ExtrasSpec:
        """What a replay item holds beside the env's fields, per env: what the acting policy
        records with each action (``make_policy(...).extras_spec``) and what the adder adds.
        Declared from the config and ``spec`` alone: no networks are built."""

    @abc.abstractmethod
    def make_replay_tables(self, spec: EnvironmentSpec, extras: ExtrasSpec | None = None) -> list:
        """The tables the agent writes to and samples from: ``shoal.replay.TableSpec``s (from
        ``shoal.replay.tables``' factories; a ``reverb.Table`` works too, at the cost of
        TensorFlow's import in the replay process), their signatures from ``spec`` and
        ``extras`` (by default ``extras_spec(spec)``)."""

    @abc.abstractmethod
    def make_dataset_iterator(self, replay_client: ReplayClient, spec: EnvironmentSpec) -> Dataset:
        """Host batches (``shoal.core.types.Sample``) from replay, one per learner update."""

    @abc.abstractmethod
    def example_batch(self, spec: EnvironmentSpec, extras: ExtrasSpec | None = None) -> Sample:
        """A batch of zeros shaped like the dataset's (``shoal.replay.layouts``; no Reverb needed):
        to feed the learner where no replay server runs (benchmarks, current-JAX machines)."""

    @abc.abstractmethod
    def make_adder(self, replay_client: ReplayClient, spec: EnvironmentSpec, extras: ExtrasSpec | None = None) -> Adder:
        """What turns the actor's vector steps into replay items (``extras``: as for the tables)."""

    @abc.abstractmethod
    def make_learner(self, key: jax.Array, networks: Any, dataset: Dataset, logger: Logger | None = None,
                     counter: Counter | None = None, replay_client: ReplayClient | None = None,
                     stopwatch: Stopwatch | None = None) -> Learner:
        """The learner, fed by ``dataset`` (from ``make_dataset_iterator``); it counts its SGD
        steps in ``counter``, logs to ``logger``, times itself with ``stopwatch``, and writes
        priorities through ``replay_client`` if the agent needs to."""

    def make_actor(self, key: jax.Array, policy: Policy, spec: EnvironmentSpec,
                   variable_source: VariableSource, adder: Adder | None = None,
                   asynchronous_updates: bool = True, env_steps_offset: int = 0) -> TrainingActor:
        """A batched actor acting with ``policy`` on params pulled from ``variable_source``
        every ``config.variable_update_period`` vector steps (in the background if
        ``asynchronous_updates``, inline otherwise: a seeded single-process run acts reproducibly)."""
        client = VariableClient(variable_source, self.config.variable_update_period,
                                asynchronous=asynchronous_updates)
        return BatchedActor(policy, key, client, adder, num_envs=spec.num_envs,
                            env_steps_offset=env_steps_offset)
