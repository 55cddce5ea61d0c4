"""The single-process runner's pacing: it never blocks, and on-policy rollouts are trained in order."""

import csv
import json
import time

import pytest

from shoal.agents.impala import IMPALABuilder, IMPALAConfig
from shoal.agents.ppo import PPOBuilder, PPOConfig
from shoal.launch import ExperimentConfig, run_experiment


def slowed(builder_cls):
    """``builder_cls`` whose learner sleeps 20 ms before every update, recording each batch's lag."""

    class Slow(builder_cls):
        lags: list = []

        def make_learner(self, *args, **kwargs):
            learner = super().make_learner(*args, **kwargs)
            step = learner.step

            def slow_step():
                time.sleep(0.02)
                metrics = step()
                Slow.lags.append(learner._keep_batch.last)  # (the agent's PolicyLag rule)
                return metrics

            learner.step = slow_step
            Slow.learner = learner
            return learner

    return Slow


def run(builder, tmp_path, max_env_steps, num_envs=4, seed=0):
    config = ExperimentConfig.from_flat(
        builder=builder,
        env_id="CartPole-v1",
        seed=seed,
        num_envs=num_envs,
        max_env_steps=max_env_steps,
        eval_every=max_env_steps,
        target_return=1e9,
        run_dir=str(tmp_path),
        progress=False,
    )
    return run_experiment(config)


@pytest.mark.e2e
def test_tiny_queue_and_slow_learner_still_finish_on_policy(tmp_path):
    builder = slowed(PPOBuilder)(PPOConfig(rollout_length=4, num_minibatches=2, queue_capacity=1))
    result = run(builder, tmp_path, max_env_steps=800)
    rollouts = 800 // (4 * 4)
    assert result["env_steps"] == 800
    assert builder.learner.version == rollouts  # every rollout was trained on, none dropped
    assert result["learner_steps"] == rollouts * 4 * 2  # epochs x minibatches each
    assert builder.lags == [0] * rollouts  # each acted with the newest params: on-policy


@pytest.mark.e2e
def test_dropping_fifo_and_slow_learner_still_finish(tmp_path):
    builder = slowed(IMPALABuilder)(IMPALAConfig(rollout_length=4, sequences_per_update=4, queue_capacity=1))
    result = run(builder, tmp_path, max_env_steps=800)
    rollouts = 800 // (4 * 4)
    # Off-policy: the runner does not wait for a batch the table already handed to the prefetch
    # thread, so the run's last rollout may still be on its way when the budget ends.
    assert result["env_steps"] == 800 and builder.learner.version in (rollouts - 1, rollouts)
    assert len(builder.lags) == builder.learner.version and min(builder.lags) >= 0  # lag is logged


@pytest.mark.e2e
def test_seeded_on_policy_run_is_reproducible_after_learning(tmp_path):
    # A queue is sampled in order and every update is paced exactly: same seed, same run, to the
    # bit (compared on what does not depend on when a log row happened to be written).
    def outcome(name, seed):
        config = ExperimentConfig.from_flat(
            builder=PPOBuilder(PPOConfig()),
            env_id="CartPole-v1",
            seed=seed,
            num_envs=16,
            max_env_steps=3_072,
            eval_every=1_024,
            target_return=1e9,
            run_dir=str(tmp_path / name),
            progress=False,
        )
        run_experiment(config)
        with open(tmp_path / name / "eval.csv") as f:
            evals = [(row["env_steps"], row["eval_return"], row["eval_return_min"]) for row in csv.DictReader(f)]
        state = json.loads((tmp_path / name / "checkpoints" / "run.json").read_text())["learner_digest"]
        return evals, state

    first, again, other = outcome("a", 1), outcome("b", 1), outcome("c", 2)
    assert len(first[0]) == 3 and first == again
    assert first[1] != other[1]


def test_a_stopping_run_interrupts_its_evaluation_which_records_nothing_and_stays_due(tmp_path):
    # (An Atari evaluation can play 27k steps; a stopping run must not wait for it.)
    import jax

    from shoal.agents import get_builder
    from shoal.core.specs import make_environment_spec
    from shoal.launch.experiments.evaluation import Evaluator

    config = ExperimentConfig.from_flat(
        builder=get_builder("dqn"),
        env_id="CartPole-v1",
        num_envs=4,
        eval_every=100,
        eval_episodes=4,
        run_dir=str(tmp_path),
        progress=False,
    )
    spec = make_environment_spec(config.make_env(1, 0))
    networks = config.make_networks(spec)
    learner = config.builder.make_learner(jax.random.PRNGKey(0), networks, iter([]))
    asked = []
    stop_after = {"calls": 5}

    def should_stop():
        asked.append(1)
        return len(asked) > stop_after["calls"]

    evaluator = Evaluator(config, learner, jax.random.PRNGKey(1), time.monotonic(), should_stop=should_stop)
    assert evaluator.due(150) and evaluator.run(150) is False
    assert len(asked) == 6 and evaluator.num_evals == 0 and evaluator.last_return is None
    assert evaluator.due(150) and evaluator.save()["next"] == 100  # still due, as before
    stop_after["calls"] = 10**9
    evaluator.run(150)
    assert evaluator.num_evals == 1 and evaluator.last_return is not None and not evaluator.due(150)
    evaluator.close()
    learner.close()
