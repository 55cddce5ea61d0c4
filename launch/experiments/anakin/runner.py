"""``run_anakin``: the runner, and the iteration, dispatch and evaluation it compiles (see the package)."""

from __future__ import annotations

import contextlib
import math
import threading
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from shoal.agents.dqn.builder import DQNBuilder
from shoal.agents.ppo import learning
from shoal.agents.ppo.builder import PPOBuilder
from shoal.agents.ppo.config import PPOConfig
from shoal.agents.sac.builder import SACBuilder
from shoal.core.loggers import TerminalLogger, make_logger
from shoal.core.timing import Stopwatch, breakdown, process_seconds
from shoal.core.types import ActorInfo
from shoal.envs.jax_envs import is_jax_env, make_jax_vector_env
from shoal.envs.jax_vector import JaxVectorEnv
from shoal.envs.multiagent import agent_returns
from shoal.launch.experiments.anakin import dqn, sac
from shoal.launch.experiments.anakin.checkpoints import restore_checkpoint, save_checkpoint
from shoal.launch.experiments.anakin.evaluation import EVAL_SEED_OFFSET, make_evaluation
from shoal.launch.experiments.anakin.loop import Loop
from shoal.launch.experiments.callbacks import Callbacks, Evaluation
from shoal.launch.experiments.config import ExperimentConfig
from shoal.launch.experiments.run_directory.checkpoints import Checkpointer, Periodic
from shoal.launch.experiments.run_directory.claim import claim_run_directory
from shoal.launch.experiments.tracking import start_tracking
from shoal.learners.placement import Placement, shard_map
from shoal.learners.updates import AXIS_NAME


class Carry(NamedTuple):
    """What one dispatch carries from iteration to iteration (per device: its envs)."""

    train: learning.TrainingState  # replicated
    env: Any  # jax_vector.EnvState, [N / devices] per device
    observation: Any  # [N / devices, ...]
    discounted_return: jax.Array  # [N / devices]: for reward normalization (as DiscountedReturns)
    key: jax.Array  # replicated; each device folds in its index
    updates: jax.Array  # updates done (the params version the policy records)
    episodes: jax.Array  # episodes ended in this dispatch (over all devices) ...
    return_sum: jax.Array  # ... the sum of their returns
    length_sum: jax.Array  # ... and of their lengths
    memory: Any = None  # recurrent PPO: each env's LSTM state [N / devices, 2H] (None: feed-forward)


def check_anakin(config: ExperimentConfig, num_devices: int) -> None:
    """One ``ValueError`` line for what the compiled loop does not run (before anything is made)."""
    if not is_jax_env(config.env.id):
        raise ValueError(
            f"--launcher anakin compiles the env into the training loop, and {config.env.id} is not a JAX env "
            "(a gymnasium env steps in Python on the host); name one, e.g. --env gymnax:CartPole-v1, "
            "or drop --launcher anakin"
        )
    if config.env.factory is not None:
        raise ValueError("--launcher anakin takes a JAX env id (gymnax:<Id>), not --env-factory")
    if isinstance(config.builder, (DQNBuilder, SACBuilder)):
        _check_batch(config.builder.name, config.builder.config.batch_size, num_devices)
    elif isinstance(config.builder, PPOBuilder):
        _check_ppo(config.builder.config)
    else:
        raise ValueError(
            f"--launcher anakin trains PPO, DQN and SAC for now (--agent ppo|dqn|sac), not {config.builder.name}"
        )
    if config.tracking.video_every:
        raise ValueError(
            f"--launcher anakin records no evaluation videos (its envs run compiled, without a renderer): "
            f"drop --video-every (got {config.tracking.video_every})"
        )
    if config.run.record_dataset is not None:
        raise ValueError(
            "--launcher anakin keeps its envs' steps on the device: --record-dataset records a one-process "
            "run's actor (run the JAX env through the replay-backed actors, or record a trained policy with "
            "shoal record)"
        )
    if config.env.num_envs % num_devices:
        raise ValueError(
            f"--num-envs {config.env.num_envs} does not divide over the {num_devices} local devices: "
            f"the compiled loop steps num_envs / devices envs on each (use a multiple of {num_devices})"
        )


def _check_ppo(c: PPOConfig) -> None:
    """What PPO's compiled loop does not run, one line."""
    if c.rollouts_per_update != 1:
        raise ValueError(
            f"--launcher anakin updates on every rollout of its num_envs envs: rollouts_per_update must be 1, "
            f"got {c.rollouts_per_update} (raise --num-envs instead)"
        )


def _check_batch(agent: str, batch_size: int, num_devices: int) -> None:
    """What DQN's and SAC's compiled loop (``anakin.off_policy``) does not run, one line."""
    if batch_size % num_devices:
        raise ValueError(
            f"{agent.upper()}'s batch_size {batch_size} does not divide over the {num_devices} local devices "
            f"(each draws batch_size / devices from its envs' rows; use a multiple of {num_devices})"
        )


def make_iteration(builder: PPOBuilder, networks: Any, venv: JaxVectorEnv) -> Any:
    """One iteration on one device's envs: ``carry -> carry`` (rollout, then PPO's update).

    Recurrent PPO (``lstm_size > 0``): the policy acts from each env's LSTM state in
    ``carry.memory`` and records it in its extras (``core_state``: the first step's is the state a
    sequence's unroll starts from, ``agents.ppo.recurrent``); an env's state is reset to zeros
    where its episode ended, as the replay path's actor does (``BatchedActor``)."""
    config = builder.config
    policy = builder.make_policy(networks, venv.spec, evaluation=False)
    rnn = policy.initial_state is not None
    update = learning.make_update(networks, config, builder.loss)  # PPO's update, its loss seam included
    steps_per_iteration = config.rollout_length * venv.num_envs

    def env_step(carry: Carry, key: jax.Array) -> tuple[Carry, dict]:
        policy_key, step_key = jax.random.split(key)
        info = ActorInfo(carry.updates * steps_per_iteration, carry.updates)
        if rnn:
            action, extras, _, memory = policy.apply(
                carry.train.params, policy_key, carry.observation, info, carry.memory
            )
        else:
            action, extras, _ = policy.apply(carry.train.params, policy_key, carry.observation, info)
        env, step = venv.step(step_key, carry.env, action)
        done = jnp.logical_or(step.terminated, step.truncated)
        if rnn:  # (fresh states where an episode ended: the next step starts one)
            carry = carry._replace(memory=jnp.where(done[:, None], jnp.zeros_like(memory), memory))
        discounted = config.discount * carry.discounted_return + step.reward
        if config.normalize_rewards:
            extras = {**extras, "discounted_return": discounted}
        transition = {
            "observation": carry.observation,
            "next_observation": step.final_observation,
            "action": action,
            "reward": step.reward,
            "terminated": step.terminated,
            "truncated": step.truncated,
            "extras": extras,
        }
        ended = jax.lax.psum(jnp.sum(done), AXIS_NAME)
        carry = carry._replace(
            env=env,
            observation=step.observation,
            discounted_return=jnp.where(done, 0.0, discounted),
            episodes=carry.episodes + ended,
            return_sum=carry.return_sum + jax.lax.psum(jnp.sum(step.episode_return), AXIS_NAME),
            length_sum=carry.length_sum + jax.lax.psum(jnp.sum(step.episode_length), AXIS_NAME),
        )
        return carry, transition

    def iteration(carry: Carry) -> tuple[Carry, dict]:
        key, rollout_key = jax.random.split(carry.key)
        device_key = jax.random.fold_in(rollout_key, jax.lax.axis_index(AXIS_NAME))
        carry, rollout = jax.lax.scan(env_step, carry, jax.random.split(device_key, config.rollout_length))
        batch = jax.tree_util.tree_map(lambda x: jnp.swapaxes(x, 0, 1), rollout)  # [T, N, ...] -> [N, T, ...]
        train, out = update(carry.train, batch)
        return carry._replace(train=train, key=key, updates=carry.updates + 1), dict(out.metrics)

    return iteration


PPO_SPECS = Carry(P(), P(AXIS_NAME), P(AXIS_NAME), P(AXIS_NAME), P(), P(), P(), P(), P())  # type: ignore[arg-type]  # (a pytree of specs)
RECURRENT_PPO_SPECS = PPO_SPECS._replace(memory=P(AXIS_NAME))  # (each env's LSTM state, split as the envs)
# A dispatch runs in parts of about this many seconds (timed as they go): a stop (SIGTERM, Ctrl-C,
# a tune's) is honoured at the end of the part under way, not of the evaluation interval
PART_S = 2.0


def _is_spec(x: Any) -> bool:
    return isinstance(x, P)


def make_dispatch(iteration: Any, placement: Placement, specs: Any = PPO_SPECS) -> Any:
    """``(carry, n, fresh) -> (carry, metrics of the last iteration)``: ``n`` iterations (``n >= 1``,
    a traced number: one compilation for every ``n``), jitted over the devices' mesh. ``fresh``
    (a traced bool) zeroes the carry's episode counts first (an evaluation interval's first part;
    its later parts add to them: the sums an interval logs are the same in one part or several)."""

    def run(carry: Carry, n: jax.Array, fresh: jax.Array) -> tuple[Carry, dict]:
        zero = jnp.zeros((), jnp.float32)
        keep = lambda x: jnp.where(fresh, zero, x)  # noqa: E731
        carry = carry._replace(
            episodes=keep(carry.episodes), return_sum=keep(carry.return_sum), length_sum=keep(carry.length_sum)
        )
        shapes = jax.eval_shape(iteration, carry)[
            1
        ]  # (the metrics' structure: iteration traced once more, not compiled)
        metrics = jax.tree_util.tree_map(lambda x: jnp.zeros(x.shape, x.dtype), shapes)
        return jax.lax.fori_loop(0, n, lambda _, cm: iteration(cm[0]), (carry, metrics))

    return jax.jit(shard_map(run, placement.mesh, (specs, P(), P()), (specs, P())))


def place(carry: Any, placement: Placement, specs: Any = PPO_SPECS) -> Any:
    """The carry on the devices as ``specs`` say: the training state, key and counters
    replicated, the envs (and a device buffer's rows) split."""
    return jax.tree_util.tree_map(
        lambda spec, x: placement.replicate(x) if spec == P() else placement.shard(x), specs, carry, is_leaf=_is_spec
    )


def _ppo_loop(builder: PPOBuilder, networks: Any, venv: JaxVectorEnv, keys: tuple[jax.Array, ...]) -> Loop:
    """PPO's part of the compiled loop (``make_iteration``)."""
    train_key, env_key, loop_key = keys
    observation, env_state = venv.reset(env_key)
    zero = jnp.zeros((), jnp.float32)
    initial_state = builder.make_policy(networks, venv.spec, evaluation=False).initial_state
    memory = None if initial_state is None else initial_state(venv.num_envs)  # (recurrent PPO: fresh states)
    initial = Carry(
        builder.init_state(train_key, networks),
        env_state,
        observation,
        jnp.zeros(venv.num_envs, jnp.float32),
        loop_key,
        jnp.zeros((), jnp.int32),
        zero,
        zero,
        zero,
        memory,
    )
    c = builder.config
    steps = venv.num_envs * c.rollout_length
    specs = PPO_SPECS if memory is None else RECURRENT_PPO_SPECS
    return Loop(initial, make_iteration(builder, networks, venv), specs, steps, c.num_epochs * c.num_minibatches)


def run_anakin(config: ExperimentConfig, stop: threading.Event | None = None) -> dict[str, Any]:
    """Trains ``config`` (PPO, DQN or SAC on a JAX env) in the compiled loop until the greedy evaluation
    reaches the target return, ``max_env_steps`` runs out or ``stop`` is set; returns the
    result line (and writes it, with the logs, in the run directory if there is one)."""
    start = time.monotonic()
    config.validate_settings()
    placement = Placement(jax.local_devices())
    check_anakin(config, len(placement.devices))
    multiagent = config.multiagent  # (a JaxMARL env's agents as rows, as a PettingZoo env's)
    venv = make_jax_vector_env(
        config.env.id, config.env.args, config.env.num_envs, multiagent.agent_ids, multiagent.global_state
    )
    spec = venv.spec
    config.validate_agent(spec)
    run_dir = claim_run_directory(config, spec) if config.run.dir else None
    with contextlib.ExitStack() as stack:
        if run_dir is not None:
            stack.callback(run_dir.unlock)
        tracker, result = start_tracking(config), None  # (--track: the logs, as the replay path's)
        try:
            result = _train(config, venv, placement, start, stop, stack)
            result["process_s"] = round(process_seconds(), 3)
            if run_dir is not None:
                run_dir.write_json("result.json", result)
        finally:
            if tracker is not None:
                tracker.close(result, stop)
    return result


def _train(
    config: ExperimentConfig,
    venv: JaxVectorEnv,
    placement: Placement,
    start: float,
    stop: threading.Event | None,
    stack: contextlib.ExitStack,
) -> dict[str, Any]:
    builder = config.builder
    stopwatch = Stopwatch()
    networks = config.make_networks(venv.spec)
    keys = tuple(jax.random.split(jax.random.PRNGKey(config.run.seed), 3))
    if isinstance(builder, DQNBuilder):
        loop = dqn.make_loop(builder, networks, venv, len(placement.devices), *keys)
    elif isinstance(builder, SACBuilder):
        loop = sac.make_loop(builder, networks, venv, len(placement.devices), *keys)
    else:
        loop = _ppo_loop(builder, networks, venv, keys)  # type: ignore[arg-type]  # (check_anakin: PPO, DQN or SAC)
    initial = loop.initial
    host: dict[str, Any] = {"env_steps": 0, "updates": 0, "learner_steps": 0, "num_evals": 0, "last_return": None}
    resumed_from = None
    if config.run.resume:
        assert config.run.dir is not None  # (run_experiment's rule: a resume needs its run directory)
        initial, host = restore_checkpoint(config.run.dir, jax.device_get(initial))
        resumed_from = host["env_steps"]
    # (strong types: a fresh carry's weak-typed leaves, e.g. gymnax's step counter, as a restored one's,
    # so that a resumed run compiles the same program and finds it in the compilation cache)
    initial = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.asarray(x).dtype), initial)
    carry = place(initial, placement, loop.specs)
    steps_per_iteration = loop.steps_per_iteration
    per_dispatch = max(1, config.evaluation.every // steps_per_iteration)
    loggers = {name: make_logger(name, config.run.dir, terminal=False) for name in ("train", "eval")}
    loggers["learner"] = make_logger("learner", config.run.dir, terminal=False, step_key="learner_steps")
    for logger in loggers.values():
        stack.callback(logger.close)
    progress = (
        TerminalLogger("train", time_delta=config.tracking.progress_every_s) if config.tracking.progress else None
    )
    with stopwatch.time("compile"):
        dispatch = make_dispatch(loop.iteration, placement, loop.specs)
        dispatch = dispatch.lower(carry, jnp.int32(per_dispatch), jnp.bool_(True)).compile()
    with stopwatch.time("compile_evaluation"):
        greedy = builder.make_policy(networks, venv.spec, evaluation=True)
        evaluation = make_evaluation(greedy, venv, config.evaluation.episodes)
        evaluation = evaluation.lower(carry.train.params, jax.random.PRNGKey(0)).compile()
    target = config.resolved_target_return()
    env_steps, updates, num_evals = host["env_steps"], host["updates"], host["num_evals"]
    sgd_steps = loop.sgd_steps_per_update
    last_return: float | None = host["last_return"]
    eval_s, first_step_s = 0.0, None
    checkpointer = Checkpointer(config.run.dir) if config.run.dir else None
    due = Periodic(config.run.checkpoint_every_s)

    def checkpoint() -> None:
        if checkpointer is None or config.run.dir is None:
            return
        counts = {"env_steps": env_steps, "updates": updates, "learner_steps": updates * sgd_steps}
        with stopwatch.time("checkpoint"):
            save_checkpoint(
                config.run.dir,
                checkpointer,
                carry,
                {**counts, "num_evals": num_evals, "last_return": last_return},
                builder.name,
                venv.spec,
            )
        due.reset()

    callbacks = Callbacks(list(config.callbacks))

    def evaluate() -> tuple[float, bool]:
        """Evaluates (a host sync, at a dispatch's end), logs the row and calls the callbacks;
        ``(the mean return, whether a callback asked to end the run)``."""
        nonlocal num_evals, eval_s
        t0 = time.monotonic()
        with stopwatch.time("evaluation"):
            key = jax.random.PRNGKey(config.run.seed + EVAL_SEED_OFFSET + 7919 * num_evals)
            returns = np.asarray(evaluation(carry.train.params, key)[0])
        eval_s += time.monotonic() - t0
        num_evals += 1
        mean = float(np.mean(returns))
        row = {
            "env_steps": env_steps,
            "eval_return": mean,
            "eval_return_min": float(np.min(returns)),
            "eval_return_max": float(np.max(returns)),
        }
        if venv.agents:  # (a JaxMARL env's rows: each agent's and the team's, as the replay path logs them)
            row.update(agent_returns(returns, venv.agents))
        loggers["eval"].write({**row, "params_version": updates, "wall_s": time.monotonic() - start})
        if not callbacks:
            return mean, False
        evaluated = Evaluation(  # (host code between two dispatches: no device sync in the scan for it)
            env_steps=int(env_steps),
            returns=returns,
            mean_return=mean,
            num_evals=num_evals,
            wall_s=time.monotonic() - start,
            params=jax.device_get(carry.train.params),
            params_version=int(updates),
            run_dir=config.run.dir,
        )
        return mean, callbacks.evaluation(evaluated)

    solved = target is not None and last_return is not None and last_return >= target  # (a resumed run's)
    part = 1  # (iterations in the next part of a dispatch: grown to ~PART_S once one is timed)
    ended = False  # (a callback asked to end the run)
    while (
        not solved and not ended and env_steps < config.run.max_env_steps and not (stop is not None and stop.is_set())
    ):
        # (to the next evaluation, on the grid of eval_every from step 0: a run stopped between two
        # evaluations and resumed evaluates where the run that never stopped does)
        into = (env_steps // steps_per_iteration) % per_dispatch  # (iterations of this interval already run)
        left = per_dispatch - into
        todo = min(left, math.ceil((config.run.max_env_steps - env_steps) / steps_per_iteration))
        t0 = time.monotonic()
        with stopwatch.time("train"):  # (env steps and updates on the device, in parts of ~PART_S)
            ran = 0
            while ran < todo:
                n = min(todo - ran, part)
                began = time.monotonic()
                carry, metrics = dispatch(carry, jnp.int32(n), jnp.bool_(ran == 0 and not into))
                done = jax.device_get(carry.updates)  # (the part's end: a stop may be honoured here)
                part = max(1, min(per_dispatch, round(n * PART_S / max(time.monotonic() - began, 1e-6))))
                ran += n
                if stop is not None and stop.is_set():
                    break
            metrics, stats = jax.device_get((metrics, (carry.episodes, carry.return_sum, carry.length_sum)))
        if first_step_s is None:
            first_step_s = process_seconds()
        planned, todo = todo, ran  # (fewer where a stop came between two parts)
        env_steps, updates = env_steps + todo * steps_per_iteration, int(done)  # (DQN's wait for min_replay_size)
        learner_steps = updates * sgd_steps  # (SGD steps, as the replay-backed learner counts them)
        episodes, return_sum, length_sum = (float(x) for x in stats)
        row = {
            "env_steps": env_steps,
            "steps_per_s": todo * steps_per_iteration / max(time.monotonic() - t0, 1e-9),
            "learner_steps": learner_steps,
            "episodes": int(episodes),
            "episode_return": return_sum / episodes if episodes else float("nan"),
            "episode_length": length_sum / episodes if episodes else float("nan"),
            "eval_return": last_return if last_return is not None else float("nan"),
            "wall_s": time.monotonic() - start,
        }
        loggers["train"].write(row)
        loggers["learner"].write(
            {"learner_steps": learner_steps, "updates": updates, **{k: float(v) for k, v in metrics.items()}}
        )
        if progress is not None:
            progress.write({k: row[k] for k in ("env_steps", "steps_per_s", "learner_steps", "episode_return")})
        if ran < planned:
            break  # (stopped between two parts: no evaluation off the grid; the checkpoint below)
        last_return, ended = evaluate()
        solved = target is not None and last_return >= target
        if not (solved or ended) and due.due():
            checkpoint()
    wall_s = time.monotonic() - start  # (the result is settled: the last checkpoint is not in it)
    checkpoint()
    result = {
        "agent": builder.name,
        "env": config.env.id,
        "seed": config.run.seed,
        "solved": solved,
        "env_steps": int(env_steps),
        "wall_s": round(wall_s, 3),
        "train_s": round(wall_s - eval_s, 3),
        "eval_s": round(eval_s, 3),
        "final_eval_return": last_return,
        "learner_steps": int(updates * sgd_steps),
        "num_evals": num_evals,
        "launcher": "anakin",
        "devices": len(placement.devices),
        "time_breakdown": {"process": breakdown(stopwatch.seconds, wall_s)},
        **({"first_step_s": round(first_step_s, 3)} if first_step_s is not None else {}),
        **({"resumed_from": resumed_from} if resumed_from is not None else {}),
        **({"terminated": getattr(stop, "reason", "SIGTERM")} if stop is not None and stop.is_set() else {}),
        **({"stopped_by": callbacks.stopped_by} if callbacks.stopped_by else {}),
    }
    callbacks.end(result)
    return result
