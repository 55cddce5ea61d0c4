"""A trained policy out of its run directory: ``load_policy`` (Python) and ``evaluate_run``
(``shoal evaluate RUN_DIR``).

Both read the run's ``config.json`` as a resume does (``runs.load_run``: the directory must be
this user's and writable by nobody else, and code only the directory names, such as a plug-in
agent or an env factory, is used only when named again or trusted), build the run's networks
for its env, and restore the parameters of one learner checkpoint: the last complete one
(``checkpoints/run.json`` names it; a run still going on is read as it stood then) or the one
``checkpoint`` names (an env-step number among ``checkpoints/learner/``; the last two are kept).

``evaluate_run`` is bounded: at most ``MAX_EPISODES`` episodes (more is refused in one line),
run ``ENVS_AT_ONCE`` at a time (episode ``i`` is reset with seed ``seed + i`` whichever round it
falls in), its memory the episodes' returns and lengths (two numbers each) and one round's envs;
``progress_every_s`` prints where a long evaluation stands on stderr.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from shoal.actors import BatchedActor, VariableClient
from shoal.actors.loops import evaluate
from shoal.agents.registry import agent_name
from shoal.core.interfaces import VariableSource
from shoal.core.specs import EnvironmentSpec, make_environment_spec
from shoal.launch.experiments.run_directory.checkpoints import _readable, check_spec, orbax_checkpoint, read_run
from shoal.launch.experiments.run_directory.claim import load_run

MAX_EPISODES = 100_000  # the most episodes one evaluate_run plays (shoal evaluate --episodes)
ENVS_AT_ONCE = 256  # the most envs (episodes side by side) one round of evaluate_run makes
MAX_SEED = 2**31 - 1  # the largest seed an episode of evaluate_run is reset with (seed + i): ALE's, and a run's --seed
PROGRESS_EVERY_S = 10.0  # shoal evaluate's progress lines on stderr: one at most this often


class _Fixed(VariableSource):
    """Parameters that never change (version 1)."""

    def __init__(self, params: Any) -> None:
        self._params = params

    def get_variables(self, known_version: int = -1) -> tuple[int, Any]:
        return 1, (None if known_version == 1 else self._params)


class TrainedPolicy:
    """A run's policy on the parameters of one of its checkpoints (``load_policy``).

    ``policy(observation)`` acts on one observation (shaped as the env's observation space, a
    dict for a Dict space) and returns one action, or on a batch (a leading axis; a dict of
    batches) and returns a batch of actions. Action masks travel in the observation, as in
    training. A recurrent policy keeps one state per row of the batch it was called on, from
    call to call: ``reset()`` starts fresh episodes (all rows), ``end_episodes(done)`` those
    rows where ``done`` is true. ``greedy=False`` samples as the actors did in training (seeded).

    Attributes: ``config`` (the run's ``ExperimentConfig``), ``spec`` (its env's
    ``EnvironmentSpec``), ``networks`` (the run's, for ``spec``), ``params``, ``checkpoint`` (the
    learner checkpoint's env-step number), ``anakin`` (whether the run is the compiled loop's).
    """

    def __init__(
        self,
        config: Any,
        spec: EnvironmentSpec,
        networks: Any,
        params: Any,
        checkpoint: int,
        greedy: bool = True,
        seed: int = 0,
        anakin: bool = False,
    ) -> None:
        self.config, self.spec, self.params, self.checkpoint = config, spec, params, checkpoint
        self.anakin = anakin  # (a run of the compiled loop: --launcher anakin)
        self.networks = networks
        self._policy = config.builder.make_policy(networks, spec, evaluation=greedy)
        self._source = _Fixed(params)
        self._seed = seed
        self._actors: dict[int, Any] = {}

    @property
    def policy(self) -> Any:
        """The agent's ``Policy`` this acts with (greedy or not, as loaded)."""
        return self._policy

    def actor(self, num_envs: int) -> Any:
        """The batched actor for ``num_envs`` rows (made at the first call of that size)."""
        if num_envs not in self._actors:
            client = VariableClient(self._source, asynchronous=False)
            self._actors[num_envs] = BatchedActor(
                self._policy, jax.random.PRNGKey(self._seed), client, num_envs=num_envs
            )
        return self._actors[num_envs]

    def __call__(self, observation: Any) -> np.ndarray:
        single = _is_single(observation, self.spec.observation)
        batch = _map(lambda x: np.asarray(x)[None], observation) if single else _map(np.asarray, observation)
        rows = len(next(iter(batch.values())) if isinstance(batch, dict) else batch)
        actions, _ = self.actor(rows).select_action(batch)
        return actions[0] if single else actions

    def reset(self) -> None:
        """Fresh episodes for every row (a recurrent policy's state starts again)."""
        self._actors.clear()

    def end_episodes(self, done: np.ndarray) -> None:
        """Fresh episodes for the rows where ``done`` is true (of the batch size ``done`` has)."""
        done = np.asarray(done, bool).reshape(-1)
        if len(done) in self._actors:
            self._actors[len(done)].end_episodes(done)


def _map(fn: Callable, observation: Any) -> Any:
    return {k: fn(v) for k, v in observation.items()} if isinstance(observation, dict) else fn(observation)


def _is_single(observation: Any, spec: Any) -> bool:
    """Whether ``observation`` is one observation of ``spec`` (else a batch of them); a shape
    that is neither is a ``ValueError`` naming both."""
    if isinstance(spec, dict):
        if not isinstance(observation, dict) or set(observation) != set(spec):
            raise ValueError(
                f"the policy takes a dict observation with keys {sorted(spec)}, got "
                f"{sorted(observation) if isinstance(observation, dict) else type(observation).__name__}"
            )
        key = sorted(spec)[0]
        observation, spec = observation[key], spec[key]
    shape, wanted = np.shape(observation), tuple(spec.shape)
    if shape == wanted:
        return True
    if len(shape) == len(wanted) + 1 and shape[1:] == wanted and shape[0] > 0:
        return False
    raise ValueError(
        f"the policy takes observations of shape {wanted} (or a batch [n, {', '.join(map(str, wanted))}]), "
        f"got shape {shape}"
    )


def checkpoints(run_dir: str) -> list[int]:
    """The learner checkpoints ``run_dir`` holds (env-step numbers, oldest first)."""
    directory = os.path.join(run_dir, "checkpoints", "learner")
    try:
        return sorted(int(name) for name in os.listdir(directory) if name.isdigit())
    except FileNotFoundError:
        return []


def _params(run_dir: str, builder: Any, networks: Any, step: int) -> Any:
    """The parameters of learner checkpoint ``step`` (restored into the structure of
    ``builder.init_state``; without one, read as saved and its ``params`` taken)."""
    ocp = orbax_checkpoint()

    manager = ocp.CheckpointManager(os.path.join(os.path.abspath(run_dir), "checkpoints", "learner"))
    template = builder.init_state(jax.random.PRNGKey(0), networks)
    with _readable(run_dir, {"learner_step": step}):
        if template is not None:
            state = manager.restore(
                step,
                args=ocp.args.StandardRestore(
                    {"state": jax.tree_util.tree_map(np.asarray, template), "version": np.asarray(0)}
                ),
            )["state"]
            return state["params"] if isinstance(state, dict) else state.params
        state = manager.restore(step, args=ocp.args.PyTreeRestore())["state"]
    if not (isinstance(state, dict) and "params" in state):
        raise ValueError(
            f"the learner checkpoint of {run_dir} holds no 'params' this agent's builder can find: "
            "give the builder an init_state(key, networks) (see 'Your own agent')"
        )
    return state["params"]


def load_policy(
    run_dir: str,
    checkpoint: int | None = None,
    greedy: bool = True,
    seed: int = 0,
    network_factory: Callable[[EnvironmentSpec], Any] | None = None,
    trust_run_dir: bool = False,
    **named: Any,
) -> TrainedPolicy:
    """The policy of the run in ``run_dir`` (any launcher; finished or still running) on the
    parameters of its last complete learner checkpoint, or of ``checkpoint`` (an env-step
    number of ``checkpoints/learner/``): a ``TrainedPolicy``. ``greedy``: the evaluation policy
    (else the acting one, sampling from ``seed``). ``network_factory``: the run's own, if it was
    trained with one (``config.json`` cannot record code). ``named``: ``agent=``,
    ``env_factory=``, ``env_id=`` as for a resume, to use code the directory names (or
    ``trust_run_dir=True``)."""
    config, _ = load_run(run_dir, trust_run_dir=trust_run_dir, **named)
    if network_factory is not None:
        config.network_factory = network_factory
    run = read_run(run_dir)
    held = checkpoints(run_dir)
    if checkpoint is None:
        if run is None:
            raise ValueError(
                f"{run_dir} holds no complete checkpoint yet (no checkpoints/run.json): a run writes "
                "one every --checkpoint-every seconds and at its end"
            )
        checkpoint = int(run["learner_step"])
    elif int(checkpoint) not in held:
        raise ValueError(
            f"{run_dir} holds no learner checkpoint {checkpoint}; it holds {', '.join(map(str, held)) or 'none'}"
        )
    env = config.make_env(1, seed, evaluation=True)
    try:
        spec = make_environment_spec(env)
    finally:
        env.close()
    if isinstance(run, dict) and isinstance(run.get("spec"), dict):  # (e.g. an env whose observations changed since)
        check_spec(run_dir, run, spec, "now", "this Shoal makes of its config")
    networks = config.make_networks(spec)
    anakin = isinstance(run, dict) and isinstance(run.get("anakin"), dict)  # (its checkpoints: the whole carry)
    if anakin:
        from shoal.launch.experiments.anakin.checkpoints import restore_params  # lazy: anakin runs only

        params = restore_params(run_dir, int(checkpoint), config.builder, networks)
    else:
        params = _params(run_dir, config.builder, networks, int(checkpoint))
    return TrainedPolicy(config, spec, networks, params, int(checkpoint), greedy=greedy, seed=seed, anakin=anakin)


class _Progress:
    """Where an evaluation of ``episodes`` episodes stands, one stderr line at most every
    ``every_s`` seconds (``None``: silent), counted by the actor it wraps (``actor``)."""

    def __init__(self, episodes: int, every_s: float | None) -> None:
        self.episodes, self.every_s = episodes, every_s
        self.done = self.env_steps = 0
        self.started = self._last = time.monotonic()

    def actor(self, actor: Any, rows: int) -> Any:
        """``actor`` (of ``rows`` envs), each of its vector steps counted."""
        progress = self

        class Counted:
            def select_action(self, observation: Any) -> Any:
                selected = actor.select_action(observation)
                progress.step(rows)
                return selected

            def __getattr__(self, name: str) -> Any:
                return getattr(actor, name)

        return Counted()

    def step(self, rows: int) -> None:
        self.env_steps += rows
        now = time.monotonic()
        if self.every_s is not None and now - self._last >= self.every_s:
            self._last = now
            print(
                f"shoal evaluate: {self.done:,} of {self.episodes:,} episodes done ({self.env_steps:,} env steps, "
                f"{now - self.started:.0f} s)",
                file=sys.stderr,
                flush=True,
            )


def _stats(x: np.ndarray) -> dict[str, float]:
    return {
        "mean": float(np.mean(x)),
        "std": float(np.std(x)),
        "median": float(np.median(x)),
        "min": float(np.min(x)),
        "max": float(np.max(x)),
    }


def _play(
    policy: TrainedPolicy, episodes: int, seed: int, at_once: int, progress: _Progress
) -> tuple[np.ndarray, np.ndarray, list[str] | None]:
    """``(returns, lengths, agents)`` of ``episodes`` episodes of ``policy`` on its env (see
    ``evaluate_run``), ``at_once`` env copies a round; ``agents``: a many-agent env's, else ``None``."""
    config = policy.config
    returns, lengths = np.zeros(episodes), np.zeros(episodes, np.int64)
    envs: dict[int, Any] = {}  # (one per round size: the full rounds' and the last one's)
    agents: list[str] | None = None
    try:
        for first in range(0, episodes, at_once):
            copies = min(at_once, episodes - first)  # (episodes of this round: one per env copy)
            if copies not in envs:
                envs[copies] = config.make_env(copies, seed + first, evaluation=True)
            env = envs[copies]
            rows = env.num_envs  # (a PettingZoo env's: copies x agents, copy by copy; shoal.envs.multiagent)
            agents = getattr(env, "agents", None) if rows != copies else None
            row_lengths = np.zeros(rows, np.int64)
            row_returns = evaluate(
                env, progress.actor(policy.actor(rows), rows), seed=seed + first, lengths=row_lengths
            )
            # (an episode is a copy's: its agents' returns summed, the longest agent's length)
            # (no should_stop: evaluate returns the returns, never None)
            returns[first : first + copies] = row_returns.reshape(copies, -1).sum(axis=1)  # type: ignore[union-attr]
            lengths[first : first + copies] = row_lengths.reshape(copies, -1).max(axis=1)
            progress.done = first + copies
    finally:
        for env in envs.values():
            env.close()
    return returns, lengths, agents


def evaluate_run(
    run_dir: str,
    episodes: int = 10,
    checkpoint: int | None = None,
    seed: int | None = None,
    greedy: bool = True,
    env_args: dict[str, Any] | None = None,
    trust_run_dir: bool = False,
    envs_at_once: int = ENVS_AT_ONCE,
    progress_every_s: float | None = None,
    **named: Any,
) -> dict[str, Any]:
    """``episodes`` episodes (at most ``MAX_EPISODES``; ``envs_at_once`` in parallel, one per env
    copy, round after round) of the run's policy on its env (``env_args`` updating the run's),
    episode ``i`` reset with ``seed + i`` (``seed`` in [0, ``MAX_SEED - episodes + 1``]: every
    episode's seed at most ``MAX_SEED``, as Atari's vector env needs; default: a fresh one);
    returns their return and length statistics (mean, std, median, min, max) with the checkpoint
    and seed used. On a many-agent (PettingZoo) env an episode is one env copy's: its return the
    sum of its agents' returns, its length its longest agent's (the result names the ``agents``). A
    compiled-loop run (``--launcher anakin``) is evaluated as it evaluated itself, in one jitted
    loop (``anakin.evaluation``): its round that starts at episode ``i`` plays from
    ``PRNGKey(seed + i)``, so its own evaluations come back exactly for their seeds. ``progress_every_s``: a line on stderr at most this often while it runs (and
    one at the start of an evaluation of more than one round); ``None``: silent. Bad arguments
    are refused (``ValueError``, one line) before the run directory is read."""
    if isinstance(episodes, bool) or not isinstance(episodes, int) or not 1 <= episodes <= MAX_EPISODES:
        raise ValueError(f"--episodes must be in [1, {MAX_EPISODES:,}], got {episodes!r}")
    last_seed = MAX_SEED - episodes + 1  # (the episodes' seeds, seed to seed + episodes - 1, all <= MAX_SEED)
    if seed is not None and (
        isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed <= last_seed
    ):
        raise ValueError(
            f"--seed must be in [0, {last_seed}] for {episodes:,} episodes (episode i is reset with "
            f"seed + i, at most {MAX_SEED}), got {seed!r}"
        )
    if isinstance(envs_at_once, bool) or not isinstance(envs_at_once, int) or envs_at_once < 1:
        raise ValueError(f"envs_at_once must be a positive integer, got {envs_at_once!r}")
    if progress_every_s is not None and not progress_every_s >= 0:
        raise ValueError(f"progress_every_s must be a number >= 0 or None, got {progress_every_s!r}")
    # (a SeedSequence made without entropy draws it: an int)
    seed = int(np.random.SeedSequence().entropy % (last_seed + 1)) if seed is None else int(seed)  # type: ignore[operator]
    policy = load_policy(run_dir, checkpoint, greedy=greedy, seed=seed, trust_run_dir=trust_run_dir, **named)
    config = policy.config
    if env_args:
        config.env = dataclasses.replace(config.env, args={**config.env.args, **env_args})
    at_once = min(episodes, envs_at_once)
    progress = _Progress(episodes, progress_every_s)
    if progress_every_s is not None and episodes > at_once:
        print(f"shoal evaluate: {episodes:,} episodes, {at_once:,} at a time", file=sys.stderr, flush=True)
    agents: list[str] | None = None
    if policy.anakin:  # (the compiled loop's own evaluation: a run's numbers for its seeds; anakin.evaluation)
        from shoal.launch.experiments.anakin.evaluation import evaluate_compiled  # lazy: anakin runs only

        def on_round(done: int, env_steps: int) -> None:
            progress.done = done
            progress.step(env_steps)

        returns, lengths = evaluate_compiled(policy, episodes, seed, at_once, on_round)
    else:
        returns, lengths, agents = _play(policy, episodes, seed, at_once, progress)
    per_copy = {"agents": list(agents), "return_of": "each episode's agents together (their sum)"} if agents else {}
    return {
        "run_dir": run_dir,
        "agent": agent_name(config.builder),
        "env": config.env.id,
        "checkpoint": policy.checkpoint,
        "seed": seed,
        "episodes": episodes,
        "greedy": greedy,
        **per_copy,
        "return": _stats(returns),
        "length": _stats(lengths),
    }


__all__ = ["ENVS_AT_ONCE", "MAX_EPISODES", "MAX_SEED", "TrainedPolicy", "checkpoints", "evaluate_run", "load_policy"]
