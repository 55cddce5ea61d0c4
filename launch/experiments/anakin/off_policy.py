"""The compiled loop of an agent that learns from n-step transitions under a replay ratio (DQN:
``anakin.dqn``; SAC: ``anakin.sac``): the envs, the agent's own acting policy, a replay ring
held on the device (``anakin.buffer``) and the agent's own update in one program.

One *iteration* steps the ``N`` envs ``k`` times with ``lax.scan``, acting with the agent's
policy (``builder.make_policy``, told the env steps so far over all envs and the updates done,
as an actor is), and writes each vector step into the ring; then, once the ring holds
``min_replay_size`` transitions (counted as the replay path counts them: whole n-step windows),
it draws ``u * batch_size`` windows of ``n_step`` steps, turns them into n-step transitions
(``n_step_transitions``: the adders' ``R``, bootstrap discount and ``s'``) and hands them,
``[batch, u, ...]``, to the agent's update (``u`` SGD steps in its scan). Until then an
iteration only acts (a ``lax.cond``: one program).

``k`` and ``u`` keep the agent's replay ratio, ``samples_per_insert`` (transitions trained on
per transition inserted): ``k = ceil(sgd_steps_per_update * batch_size / (samples_per_insert *
N))`` vector steps, ``u = round(k * N * samples_per_insert / batch_size)`` SGD steps (exact where
``sgd_steps_per_update * batch_size`` is a multiple of ``samples_per_insert * N``). The ring
holds ``ceil(max_replay_size / N)`` steps of each env. With several devices each holds its envs'
rows and draws ``batch_size / devices``. With a ``priority_exponent`` the ring draws windows in
proportion to ``priority ** exponent``, the batch carries each draw's ``probability`` and
``table_size`` (for the update's importance weights) and the drawn windows' priorities become the
update's ``aux`` (DQN's ``|TD|``) plus ``PRIORITY_FLOOR``.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from shoal.core.types import ActorInfo, Policy
from shoal.envs.jax_vector import JaxVectorEnv
from shoal.launch.experiments.anakin import buffer as ring
from shoal.launch.experiments.anakin.loop import Loop
from shoal.learners.updates import AXIS_NAME, UpdateFn


class ReplayConfig(Protocol):
    """The fields of an agent's config the loop reads (DQN's and SAC's have them)."""

    batch_size: int
    sgd_steps_per_update: int
    samples_per_insert: float
    min_replay_size: int
    max_replay_size: int
    n_step: int
    discount: float


class ReplayCarry(NamedTuple):
    """What one dispatch carries from iteration to iteration (per device: its envs and their rows)."""

    train: Any  # the agent's training state, replicated
    env: Any  # jax_vector.EnvState, [N / devices] per device
    observation: Any  # [N / devices, ...]
    buffer: ring.Buffer  # data [N / devices, capacity, ...] per device; position and size replicated
    key: jax.Array  # replicated; each device folds in its index
    env_steps: jax.Array  # env steps over all envs (the acting policy's clock: DQN's epsilon)
    updates: jax.Array  # updates done (of u SGD steps each)
    episodes: jax.Array  # episodes ended in this dispatch (over all devices) ...
    return_sum: jax.Array  # ... the sum of their returns
    length_sum: jax.Array  # ... and of their lengths


_SPLIT, _SAME = P(AXIS_NAME), P()
# (a pytree of specs in the carry's shape)
SPECS: Any = ReplayCarry._make([_SAME, _SPLIT, _SPLIT, ring.Buffer._make([_SPLIT, _SAME, _SAME, _SPLIT]), *[_SAME] * 6])
PRIORITY_FLOOR = 1e-6  # (added to |TD|: no written window is never drawn again)


def steps_and_updates(config: ReplayConfig, num_envs: int) -> tuple[int, int]:
    """``(k, u)``: vector steps and SGD steps of one iteration (the module docstring)."""
    c = config
    k = max(1, math.ceil(c.sgd_steps_per_update * c.batch_size / (c.samples_per_insert * num_envs)))
    return k, max(1, round(k * num_envs * c.samples_per_insert / c.batch_size))


def n_step_transitions(windows: dict, discount: float) -> dict:
    """The agent's batch from windows of ``n`` consecutive steps of one env (leaves ``[B, n, ...]``):
    ``reward`` the discounted sum up to the window's first episode end, ``discount`` ``gamma^m``
    (``m`` the steps summed; 0 if the last of them terminated), ``next_observation`` the last
    one's (its final observation where the episode ended), as the replay path's n-step adder."""
    done = jnp.logical_or(windows["terminated"], windows["truncated"])  # [B, n]
    n = done.shape[1]
    alive = jnp.cumprod(jnp.concatenate([jnp.ones_like(done[:, :1]), ~done[:, :-1]], axis=1), axis=1)
    alive = alive.astype(jnp.float32)  # [B, n]: 1 while the window's first episode goes on
    powers = discount ** jnp.arange(n, dtype=jnp.float32)
    steps = jnp.sum(alive, axis=1).astype(jnp.int32)  # m, in 1..n
    last = steps - 1
    pick = lambda x: jnp.take_along_axis(x, last.reshape(-1, *([1] * (x.ndim - 1))), axis=1)[:, 0]  # noqa: E731
    terminated = pick(windows["terminated"])
    return {
        "observation": windows["observation"][:, 0],
        "action": windows["action"][:, 0],
        "reward": jnp.sum(windows["reward"] * alive * powers, axis=1),
        "discount": jnp.where(terminated, 0.0, discount ** steps.astype(jnp.float32)),
        "next_observation": pick(windows["next_observation"]),
    }


def make_replay_loop(
    config: ReplayConfig,
    train: Any,
    policy: Policy,
    update: UpdateFn,
    venv: JaxVectorEnv,
    num_devices: int,
    env_key: jax.Array,
    loop_key: jax.Array,
    priority_exponent: float | None = None,
) -> Loop:
    """The loop of the module docstring for an agent's first training state ``train``, acting
    ``policy`` (``train.params``'s) and ``update`` (``[batch, u, ...]`` n-step transitions ->
    ``u`` SGD steps): its first carry (an empty ring) and its iteration."""
    c, num_envs = config, venv.num_envs
    k, u = steps_and_updates(c, num_envs)
    per_device_batch = c.batch_size // num_devices
    observation, env_state = venv.reset(env_key)
    info = ActorInfo(jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))
    action = jax.eval_shape(policy.apply, train.params, loop_key, observation, info)[0]
    example = {
        "observation": observation[0],
        "action": jax.ShapeDtypeStruct(action.shape[1:], action.dtype),
        "reward": jnp.zeros((), jnp.float32),
        "terminated": jnp.zeros((), bool),
        "truncated": jnp.zeros((), bool),
        "next_observation": observation[0],
    }
    rows = max(math.ceil(c.max_replay_size / num_envs), c.n_step)
    zero = jnp.zeros((), jnp.float32)
    initial = ReplayCarry(
        train,
        env_state,
        observation,
        ring.init(example, num_envs, rows, prioritized=priority_exponent is not None),
        loop_key,
        jnp.zeros((), jnp.int32),
        jnp.zeros((), jnp.int32),
        zero,
        zero,
        zero,
    )

    def env_step(carry: ReplayCarry, key: jax.Array) -> tuple[ReplayCarry, None]:
        policy_key, step_key = jax.random.split(key)
        info = ActorInfo(carry.env_steps, carry.updates)
        action, _, _ = policy.apply(carry.train.params, policy_key, carry.observation, info)
        env, step = venv.step(step_key, carry.env, action)
        written = {
            "observation": carry.observation,
            "action": action,
            "reward": step.reward,
            "terminated": step.terminated,
            "truncated": step.truncated,
            "next_observation": step.final_observation,
        }
        ended = jax.lax.psum(jnp.sum(jnp.logical_or(step.terminated, step.truncated)), AXIS_NAME)
        carry = carry._replace(
            env=env,
            observation=step.observation,
            buffer=ring.add(carry.buffer, written),
            env_steps=carry.env_steps + num_envs,
            episodes=carry.episodes + ended,
            return_sum=carry.return_sum + jax.lax.psum(jnp.sum(step.episode_return), AXIS_NAME),
            length_sum=carry.length_sum + jax.lax.psum(jnp.sum(step.episode_length), AXIS_NAME),
        )
        return carry, None

    exponent = priority_exponent

    def learn(train: Any, buffer: ring.Buffer, key: jax.Array) -> tuple[Any, ring.Buffer, dict]:
        windows, drawn = ring.sample(buffer, key, per_device_batch * u, c.n_step, exponent)
        batch = n_step_transitions(windows, c.discount)
        if exponent is not None:  # (the importance weights' inputs: (table_size x probability)^-beta)
            batch["probability"] = drawn.probability
            batch["table_size"] = jnp.broadcast_to(drawn.table_size, drawn.probability.shape).astype(jnp.float32)
        batch = jax.tree_util.tree_map(lambda x: x.reshape(per_device_batch, u, *x.shape[1:]), batch)
        train, out = update(train, batch)
        if exponent is not None:  # (|TD| [batch, u], in the draws' order)
            buffer = ring.set_priorities(buffer, drawn, out.aux.reshape(-1) + PRIORITY_FLOOR)
        return train, buffer, dict(out.metrics)

    def iteration(carry: ReplayCarry) -> tuple[ReplayCarry, dict]:
        key, rollout_key, sample_key = jax.random.split(carry.key, 3)
        device = jax.lax.axis_index(AXIS_NAME)
        carry, _ = jax.lax.scan(env_step, carry, jax.random.split(jax.random.fold_in(rollout_key, device), k))
        ready = ring.num_windows(carry.buffer, c.n_step) * num_envs >= c.min_replay_size
        device_sample_key = jax.random.fold_in(sample_key, device)
        shapes = jax.eval_shape(learn, carry.train, carry.buffer, device_sample_key)[2]
        skipped = jax.tree_util.tree_map(lambda x: jnp.zeros(x.shape, x.dtype), shapes)
        train, buffer, metrics = jax.lax.cond(
            ready,
            lambda: learn(carry.train, carry.buffer, device_sample_key),
            lambda: (carry.train, carry.buffer, skipped),
        )
        updates = carry.updates + ready.astype(jnp.int32)
        return carry._replace(train=train, buffer=buffer, key=key, updates=updates), metrics

    return Loop(initial, iteration, SPECS, k * num_envs, u)
