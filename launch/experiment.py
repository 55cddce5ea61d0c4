"""``ExperimentConfig`` and the single-process runner ``run_experiment``.

In one process the actor, an embedded Reverb server and the learner share one thread: after
every vector step the runner runs as many learner updates as the replay table's rate limiter
allows for the items inserted so far (``builder.updates_allowed``), so samples-per-insert is
kept without either side ever blocking on the other. The actor's variable source is the
learner object itself, pulled synchronously, so a seeded run's acting is reproducible
(Reverb's sampler has no seed, so which items a learner batch holds is not).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any, Callable

import gymnasium as gym
import jax
import numpy as np

from shoal.actors import EnvironmentLoop, check_env_id, make_vector_env
from shoal.agents.builders import AgentBuilder
from shoal.core.counting import Counter
from shoal.core.loggers import TerminalLogger, make_logger
from shoal.core.specs import make_environment_spec
from shoal.launch.evaluation import Evaluator
from shoal.replay import ReplayServer


@dataclasses.dataclass
class ExperimentConfig:
    """Everything a run needs; the single input of both runners.

    Attributes:
      builder: the agent (e.g. ``shoal.agents.get_builder("dqn")``).
      env_id: a registered gymnasium id.
      seed: seeds envs (``seed, seed+1, ...``), networks and exploration.
      max_env_steps: step budget, counted over all envs.
      num_envs: envs stepped together by the actor (one vector env).
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
    network_factory: Callable[[Any], Any] | None = None
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

    def to_dict(self) -> dict[str, Any]:
        builder_config = getattr(self.builder, "config", None)
        return {
            **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name not in ("builder", "network_factory")},
            "target_return": self.resolved_target_return(),
            "agent": type(self.builder).__name__,
            "agent_config": dataclasses.asdict(builder_config) if builder_config is not None else None,
            "jax_devices": [str(d) for d in jax.local_devices()],
        }


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

    networks = (config.network_factory or builder.make_networks)(spec)
    policy = builder.make_policy(networks, spec, evaluation=False)
    server = ReplayServer(builder.make_replay_tables(spec, policy))
    counter = Counter()
    learner_key, actor_key, eval_key = jax.random.split(jax.random.PRNGKey(config.seed), 3)
    dataset = builder.make_dataset_iterator(server.client)
    learner_logger = make_logger("learner", config.run_dir, terminal=False, step_key="learner_steps")
    train_logger = make_logger("train", config.run_dir, terminal=False)
    evaluator: Evaluator | None = None
    progress = TerminalLogger("train", time_delta=config.progress_every_s) if config.progress else None
    try:
        learner = builder.make_learner(learner_key, networks, dataset, learner_logger, counter,
                                       server.client)
        adder = builder.make_adder(server.client, spec, policy)
        actor = builder.make_actor(actor_key, policy, spec, learner, adder, asynchronous_updates=False)
        evaluator = Evaluator(config, learner, eval_key, start)
        loop = EnvironmentLoop(env, actor, counter, train_logger)

        updates, last_log = 0, time.monotonic()
        while loop.env_steps < config.max_env_steps:
            loop.step()
            allowed = builder.updates_allowed(adder.items_written)
            while updates < allowed:
                learner.step()
                updates += 1
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
        dataset.close()
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
