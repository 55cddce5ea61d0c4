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

**Failures.** Every factory of every builder (``FACTORIES``, wrapped where a subclass defines it)
fails in one line naming the agent and the factory: a ``ValueError``, ``RuntimeError`` or
``OSError`` it raises is its own message and passes as it is (``validate``'s contract; a run's
failure); anything else (a ``KeyError``, ``ZeroDivisionError``, ``MemoryError``, ``SystemExit``,
...) becomes a ``BuilderError`` (a ``ValueError``: ``shoal`` exits 2, with the original
traceback under ``--verbose``), and so does a factory other than ``validate`` that returns
``None``. ``try_factories`` calls the factories that build nothing heavy, so that a run can fail
on them before it writes anything.
"""

from __future__ import annotations

import abc
import copy
import dataclasses
import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Protocol

import jax

from shoal.actors.actor import BatchedActor
from shoal.actors.variable_client import VariableClient
from shoal.core.counting import Counter
from shoal.core.interfaces import Adder, Dataset, Learner, TrainingActor, VariableSource
from shoal.core.loggers import Logger
from shoal.core.settings import check_settings
from shoal.core.specs import ArraySpec, EnvironmentSpec
from shoal.core.timing import Stopwatch
from shoal.core.types import Policy, Sample
from shoal.replay.contract import ReplayClient

ExtrasSpec = Mapping[str, ArraySpec]


class AgentConfig(Protocol):
    """What every agent's config (a documented dataclass of ``shoal.core.settings`` fields)
    has, because the base builder reads it."""

    variable_update_period: int  # vector steps between an actor's parameter pulls


def extras_of(spec_or_policy: ExtrasSpec | Policy | None, builder: AgentBuilder, spec: EnvironmentSpec) -> ExtrasSpec:
    """The extras spec a replay factory was given: ``None`` -> ``builder.extras_spec(spec)``;
    a ``Policy`` (what earlier versions passed) -> the builder's own (the replay items'
    extras, which may hold more than the policy's, e.g. PPO's discounted return)."""
    if spec_or_policy is None or isinstance(spec_or_policy, Policy):
        return builder.extras_spec(spec)
    return spec_or_policy


# The factories a builder defines, each called through ``_guarded`` (module docstring).
FACTORIES = (
    "validate",
    "env_steps_before_learning",
    "make_networks",
    "make_policy",
    "extras_spec",
    "make_replay_tables",
    "make_dataset_iterator",
    "example_batch",
    "make_adder",
    "make_learner",
    "make_actor",
)
# What a factory may raise as it is: its own one-line message.
OWN_ERRORS = (ValueError, RuntimeError, OSError)


class BuilderError(ValueError):
    """A builder's factory raised what is not its own one-line error, or returned ``None``: one
    line naming the agent and the factory (the original exception is its ``__cause__``)."""


def raised(e: BaseException) -> str:
    """``Type: the first line of its message`` (``Type`` alone for an empty one)."""
    first = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def builder_label(builder: Any) -> str:
    """How an error names ``builder``: ``agent 'NAME' (Class)``, or ``agent 'module:Class'``."""
    cls = type(builder).__qualname__
    name = getattr(builder, "_agent_name", None) or getattr(type(builder), "name", None) or cls
    return f"agent {name!r}" if name.endswith(cls) else f"agent {name!r} ({cls})"


def _guarded(factory: str, method: Callable) -> Callable:
    """``method`` (a builder's ``factory``), failing as the module docstring says."""
    if getattr(method, "_shoal_guarded", False):
        return method

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            out = method(self, *args, **kwargs)
        except OWN_ERRORS:
            raise
        except (Exception, SystemExit) as e:  # noqa: BLE001 -- named, once; the traceback is its cause
            raise BuilderError(
                f"{builder_label(self)}: {factory}() raised {raised(e)} (--verbose shows the traceback)"
            ) from e
        if out is None and factory != "validate":
            raise BuilderError(f"{builder_label(self)}: {factory}() returned None")
        return out

    call._shoal_guarded = True  # type: ignore[attr-defined]
    return call


def try_factories(
    builder: AgentBuilder, spec: EnvironmentSpec, make_networks: Callable[[EnvironmentSpec], Any]
) -> None:
    """Calls the factories a run calls that build nothing heavy (no parameters, no replay
    server, nothing compiled): ``extras_spec``, ``make_replay_tables``, ``make_networks`` (or
    the run's ``network_factory``) and ``make_policy`` for acting and for evaluation, so that a
    builder that fails in one fails before a run writes anything (``validate`` and
    ``env_steps_before_learning`` are the run's own checks; the learner, dataset, adder and actor
    are built by the run, and fail there).

    Only for a plug-in builder: a built-in one's factories are the project's own, tested, and a
    run's setup calls each of them once (``tests/test_setup_walk.py``)."""
    if type(builder).__module__.startswith("shoal.agents."):  # (a built-in agent's builder)
        return
    builder.extras_spec(spec)
    builder.make_replay_tables(spec)
    networks = make_networks(spec)
    builder.make_policy(networks, spec, False)
    builder.make_policy(networks, spec, True)


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

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for factory in FACTORIES:
            if inspect.isfunction(cls.__dict__.get(factory)):
                setattr(cls, factory, _guarded(factory, cls.__dict__[factory]))

    def validate(self, spec: EnvironmentSpec, num_devices: int) -> None:
        """Raises ``ValueError`` (naming the bad value) if the agent cannot run on ``spec``:
        every config field against its range (``shoal.core.settings``), then what depends on
        the environment or on several fields (a subclass extends this)."""
        check_settings(self.config)

    def for_budget(self, max_env_steps: int) -> AgentBuilder:
        """This builder for a run of ``max_env_steps`` env steps (the experiment calls it once,
        before anything is built; the builder given is not changed). By default: an agent whose
        config has a schedule that decays over the run (a ``*_schedule`` field other than
        ``"constant"``) and leaves its horizon ``schedule_env_steps`` unset (0) gets a copy whose
        horizon is ``max_env_steps`` (the config records it, so a resumed run keeps it);
        anything else is returned as it is."""
        config = self.config
        if not dataclasses.is_dataclass(config) or getattr(config, "schedule_env_steps", None) != 0:
            return self
        if not any(
            f.name.endswith("_schedule") and getattr(config, f.name) != "constant" for f in dataclasses.fields(config)
        ):
            return self
        budgeted = copy.copy(self)
        budgeted.config = dataclasses.replace(config, schedule_env_steps=int(max_env_steps))
        return budgeted

    def init_state(self, key: jax.Array, networks: Any) -> Any:
        """The learner's initial training state (parameters, optimiser state, ...) for
        ``networks``: what ``make_learner`` starts from, and, traced with ``jax.eval_shape``
        (nothing allocated), what the memory check before a run estimates. A builder that does
        not define it (returns ``None``) is not estimated."""
        return None

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
    def make_learner(
        self,
        key: jax.Array,
        networks: Any,
        dataset: Dataset,
        logger: Logger | None = None,
        counter: Counter | None = None,
        replay_client: ReplayClient | None = None,
        stopwatch: Stopwatch | None = None,
    ) -> Learner:
        """The learner, fed by ``dataset`` (from ``make_dataset_iterator``); it counts its SGD
        steps in ``counter``, logs to ``logger``, times itself with ``stopwatch``, and writes
        priorities through ``replay_client`` if the agent needs to."""

    def make_actor(
        self,
        key: jax.Array,
        policy: Policy,
        spec: EnvironmentSpec,
        variable_source: VariableSource,
        adder: Adder | None = None,
        asynchronous_updates: bool = True,
        env_steps_offset: int = 0,
    ) -> TrainingActor:
        """A batched actor acting with ``policy`` on params pulled from ``variable_source``
        every ``config.variable_update_period`` vector steps (in the background if
        ``asynchronous_updates``, inline otherwise: a seeded single-process run acts reproducibly)."""
        client = VariableClient(variable_source, self.config.variable_update_period, asynchronous=asynchronous_updates)
        return BatchedActor(policy, key, client, adder, num_envs=spec.num_envs, env_steps_offset=env_steps_offset)


for _factory in ("validate", "make_actor"):  # (the base's own; the abstract ones are a subclass's)
    setattr(AgentBuilder, _factory, _guarded(_factory, AgentBuilder.__dict__[_factory]))
