"""``ExperimentConfig`` and the single-process runner ``run_experiment``.

In one process the actor, an embedded Reverb server and the learner share one thread, paced by
one rule for every agent and table (after Acme's runner): inserts never block (the tables'
rate limiters are rebuilt without an insert bound), and after each vector step the learner
takes its next batch if it is waiting, and goes on stepping while the table could serve yet
another batch (it lags behind the rate limiter; the runner waits the moment the prefetch thread
needs to deliver it). So a replay ratio (a ``SampleToInsertRatio`` table) and an on-policy
queue pace the same way, and updates spread out between actor steps instead of bunching.

Actor parameters come from the learner object itself, pulled synchronously, so a seeded run
acts reproducibly. An ``on_policy`` agent pulls after the learner stepped (every rollout is
acted with the newest params); any other agent pulls before, so the update it dispatches runs
on the devices while the actor takes its next vector step (acting one update behind).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any, Callable, Mapping

import gymnasium as gym
import jax
import numpy as np

from shoal.actors import EnvironmentLoop, check_env_id, make_vector_env
from shoal.agents.builders import AgentBuilder
from shoal.core.counting import Counter
from shoal.core.interfaces import Actor, Learner
from shoal.core.loggers import TerminalLogger, make_logger
from shoal.core.specs import EnvironmentSpec, make_environment_spec
from shoal.core.types import Step
from shoal.launch.experiments.evaluation import Evaluator
from shoal.replay import ReplayServer, without_insert_blocking


@dataclasses.dataclass
class ExperimentConfig:
    """Everything a run needs; the single input of both runners.

    Attributes:
      builder: the agent (e.g. ``shoal.agents.get_builder("dqn")``).
      env_id: a registered gymnasium id.
      seed: seeds envs (``seed, seed+1, ...``), networks and exploration.
      max_env_steps: step budget, counted over all envs.
      num_envs: envs stepped together by an actor (one vector env).
      eval_every: env steps between evaluations.
      eval_episodes: episodes per evaluation (run in parallel, one per env, with the
        evaluation policy, e.g. greedy).
      target_return: stop once an evaluation's mean return reaches it. ``None``: the env's
        registered ``reward_threshold`` (475 for CartPole-v1), if it has one.
      run_dir: where config, CSV logs and TensorBoard events go (``None``: nowhere).
      network_factory: ``spec -> networks``; ``None`` uses ``builder.make_networks``.
      progress: print a progress line (to stderr) about once per ``progress_every_s``.
    """

    builder: AgentBuilder
    env_id: str
    seed: int = 0
    max_env_steps: int = 100_000
    num_envs: int = 16
    eval_every: int = 2_000
    eval_episodes: int = 10
    target_return: float | None = None
    run_dir: str | None = None
    network_factory: Callable[[EnvironmentSpec], Any] | None = None
    progress: bool = True
    progress_every_s: float = 2.0

    def resolved_target_return(self) -> float | None:
        if self.target_return is not None:
            return self.target_return
        return gym.spec(self.env_id).reward_threshold

    def validate(self) -> None:
        """Raises ``ValueError`` naming the first bad setting."""
        check_env_id(self.env_id)
        for name in ("max_env_steps", "num_envs", "eval_every", "eval_episodes"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")

    def environment_spec(self) -> EnvironmentSpec:
        """The spec of this experiment's vector env (``num_envs`` copies of ``env_id``)."""
        env = make_vector_env(self.env_id, self.num_envs, self.seed)
        try:
            return make_environment_spec(env)
        finally:
            env.close()

    def make_networks(self, spec: EnvironmentSpec) -> Any:
        return (self.network_factory or self.builder.make_networks)(spec)

    def to_dict(self) -> dict[str, Any]:
        builder_config = getattr(self.builder, "config", None)
        return {
            **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name not in ("builder", "network_factory")},
            "target_return": self.resolved_target_return(),
            "agent": self.builder.name,
            "agent_config": dataclasses.asdict(builder_config) if builder_config is not None else None,
            "jax_devices": [str(d) for d in jax.local_devices()],
        }


class LearningActor(Actor):
    """An actor whose ``update`` steps the learner while data is ready (the pacing rule in the
    module docstring) and refreshes the actor's parameters: after that if ``pull_after``,
    else before. The learner reads ``items_per_update`` items of ``table`` per step."""

    def __init__(self, actor: Actor, learner: Learner, server: ReplayServer, table: str,
                 items_per_update: int, pull_after: bool, timeout_s: float = 120.0) -> None:
        self._actor, self._learner, self._server, self._table = actor, learner, server, table
        self._items_per_update, self._pull_after, self._timeout_s = items_per_update, pull_after, timeout_s
        self._items_consumed = 0

    def _behind(self) -> bool:
        """Whether the table can serve another batch now, or (for an on-policy agent, which must
        not act before training on it) already served one that is on its way to the learner."""
        if self._server.can_sample(self._table, self._items_per_update):
            return True
        return self._pull_after and (
            self._server.items_sampled(self._table) >= self._items_consumed + self._items_per_update)

    def select_action(self, observation: np.ndarray) -> tuple[np.ndarray, Mapping[str, np.ndarray]]:
        return self._actor.select_action(observation)

    def observe(self, step: Step) -> None:
        self._actor.observe(step)

    def _train(self) -> None:
        stepped, waiting_since = False, None
        while True:
            behind = self._behind()
            if self._learner.ready() and (behind or not stepped):
                self._learner.step()
                self._items_consumed += self._items_per_update
                stepped, waiting_since = True, None
            elif not behind:
                return
            elif waiting_since is None:
                waiting_since = time.monotonic()
            elif time.monotonic() - waiting_since > self._timeout_s:
                raise TimeoutError(f"replay table '{self._table}' could serve a batch, but none "
                                   f"reached the learner within {self._timeout_s}s")
            else:
                time.sleep(0.0002)  # the learner's prefetch thread is fetching the batch

    def update(self, wait: bool = False) -> None:
        if self._pull_after:
            self._train()
            self._actor.update(wait)
        else:
            self._actor.update(wait)
            self._train()


def run_experiment(config: ExperimentConfig) -> dict[str, Any]:
    """Trains in this process until solved or out of budget; returns the result summary."""
    start = time.monotonic()
    config.validate()
    builder = config.builder
    env = make_vector_env(config.env_id, config.num_envs, config.seed)
    spec = make_environment_spec(env)
    builder.validate(spec, jax.local_device_count())
    if config.run_dir:
        os.makedirs(config.run_dir, exist_ok=True)
        with open(os.path.join(config.run_dir, "config.json"), "w") as f:
            json.dump(config.to_dict(), f, indent=2, default=str)

    networks = config.make_networks(spec)
    policy = builder.make_policy(networks, spec, evaluation=False)
    server = ReplayServer(without_insert_blocking(builder.make_replay_tables(spec, policy)))
    counter = Counter()
    learner_key, actor_key, eval_key = jax.random.split(jax.random.PRNGKey(config.seed), 3)
    learner_logger = make_logger("learner", config.run_dir, terminal=False, step_key="learner_steps")
    train_logger = make_logger("train", config.run_dir, terminal=False)
    learner: Learner | None = None
    adder = evaluator = None
    progress = TerminalLogger("train", time_delta=config.progress_every_s) if config.progress else None
    try:
        dataset = builder.make_dataset_iterator(server.client, spec)
        learner = builder.make_learner(learner_key, networks, dataset, learner_logger, counter,
                                       server.client)
        adder = builder.make_adder(server.client, spec, policy)
        actor = builder.make_actor(actor_key, policy, spec, learner, adder, asynchronous_updates=False)
        actor = LearningActor(actor, learner, server, dataset.table, dataset.items_per_update,
                              pull_after=builder.on_policy)
        evaluator = Evaluator(config, learner, eval_key, start)
        loop = EnvironmentLoop(env, actor, counter, train_logger)

        last_log = time.monotonic()
        while loop.env_steps < config.max_env_steps:
            loop.step()
            if evaluator.due(loop.env_steps) and evaluator.run(loop.env_steps):
                break
            if time.monotonic() - last_log >= 1.0:
                last_log = time.monotonic()
                last = evaluator.last_return
                row = loop.log(eval_return=last if last is not None else float("nan"))
                if progress:
                    progress.write({k: row[k] for k in ("env_steps", "steps_per_s", "learner_steps",
                                                        "episode_return", "eval_return") if k in row})
        if not evaluator.solved and evaluator.last_at != loop.env_steps:  # budget ran out between evals
            evaluator.run(loop.env_steps)
        wall_s = time.monotonic() - start
        loop.log(eval_return=evaluator.last_return)
    finally:
        for part in (learner, adder):  # before the server stops: nothing left waiting on it
            if part is not None:
                part.close()
        for logger in (learner_logger, train_logger):
            logger.close()
        if evaluator is not None:
            evaluator.close()
        server.stop()
        env.close()
    result = evaluator.result(loop.env_steps, counter.get_counts().get("learner_steps", 0), wall_s)
    if config.run_dir:
        with open(os.path.join(config.run_dir, "result.json"), "w") as f:
            json.dump(result, f, indent=2)
    return result
