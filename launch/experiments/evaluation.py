"""The evaluator both runners share: evaluations on a schedule, and the run's result summary."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from shoal.actors import evaluate
from shoal.core.environment_variables import value
from shoal.core.files import make_dirs, write_atomic
from shoal.core.interfaces import VariableSource
from shoal.core.loggers import make_logger
from shoal.core.specs import make_environment_spec
from shoal.core.timing import Stopwatch
from shoal.envs.environments import env_protocol
from shoal.envs.multiagent import agent_returns
from shoal.envs.selfplay import OPPONENTS
from shoal.envs.video import TensorBoardVideos, encode_mp4, record_episode_within, video_env
from shoal.launch.experiments.callbacks import Callbacks, Evaluation

EVAL_SEED_OFFSET = 1_000_003


class Evaluator:
    """Runs ``config.evaluation.episodes`` episodes in parallel with the evaluation policy (e.g.
    greedy) once ``eval_every`` more env steps were taken. The k-th evaluation resets its envs
    with seed ``seed + 1_000_003 + 7919 k``, so a seeded run evaluates reproducibly. Each
    evaluation is one row of ``<run_dir>/eval.csv``. An evaluation that ``should_stop()``
    interrupts (a stopping run) records nothing and stays due.
    """

    def __init__(
        self,
        config: Any,
        variable_source: VariableSource,
        key: jax.Array,
        start_time: float,
        stopwatch: Stopwatch | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> None:
        builder = config.builder
        self._config, self._start, self._should_stop = config, start_time, should_stop
        self._env = config.make_env(config.evaluation.episodes, config.run.seed + EVAL_SEED_OFFSET, evaluation=True)
        spec = make_environment_spec(self._env)
        networks = config.make_networks(spec)
        self._actor = builder.make_actor(
            key, builder.make_policy(networks, spec, True), spec, variable_source, None, asynchronous_updates=False
        )
        self._source = variable_source
        self._logger = make_logger("eval", config.run.dir, terminal=False)
        self._target = config.resolved_target_return()
        self._next = config.evaluation.every
        self.eval_s, self.num_evals = 0.0, 0  # (the run's, over its resumes: the checkpoint's)
        self._eval_s_before = 0.0  # (what a resumed run's checkpoint held: not this launch's)
        self.stopwatch = stopwatch or Stopwatch()  # (a single-process run shares its own)
        self.last_return: float | None = None
        self.last_at = -1  # env steps at the last evaluation
        self._video: tuple[Any, Any, Callable] | None = None  # (env, actor, render), made at the first video
        self._tensorboard_videos: Any = None  # (actors.video.TensorBoardVideos, made with self._video)
        self._videos_on = True  # (until one fails: the run's config is not changed)
        self._key = key
        self._callbacks = Callbacks(list(config.callbacks))

    def due(self, env_steps: int) -> bool:
        return env_steps >= self._next

    @property
    def solved(self) -> bool:
        """Whether the last evaluation reached the target return."""
        return self._target is not None and self.last_return is not None and self.last_return >= self._target

    def run(self, env_steps: int) -> bool:
        """Evaluates the newest parameters now; returns ``solved``, or ``True`` where a
        callback asked to end the run (``shoal.launch.experiments.callbacks``)."""
        every, due_at = self._config.evaluation.every, self._next
        if env_steps >= self._next:
            self._next += every * (1 + (env_steps - self._next) // every)
        t0 = time.monotonic()
        with self.stopwatch.time("evaluation"):
            self._actor.update(wait=True)
            returns = evaluate(
                self._env,
                self._actor,
                should_stop=self._should_stop,
                seed=self._config.run.seed + EVAL_SEED_OFFSET + 7919 * self.num_evals,
            )
            # (self-play: win rates against each opponent, in the evaluation's time)
            rates = self._win_rates(returns) if returns is not None and getattr(self._env, "pool", None) else {}
        if returns is None or rates is None:  # interrupted: nothing recorded, still due
            self._next = due_at
            return False
        self.num_evals += 1
        self.eval_s += time.monotonic() - t0
        self.last_return, self.last_at = float(np.mean(returns)), env_steps
        row = {
            "env_steps": env_steps,
            "eval_return": self.last_return,
            "eval_return_min": float(np.min(returns)),
            "eval_return_max": float(np.max(returns)),
        }
        agents = getattr(self._env, "agents", None)  # (a PettingZoo env's rows: shoal.envs.multiagent)
        if agents:
            row.update(agent_returns(returns, agents))
        row.update(rates)
        self._logger.write(
            {**row, "params_version": self._actor.params_version, "wall_s": time.monotonic() - self._start}
        )
        every = self._config.tracking.video_every
        if every and self._videos_on and self._config.run.dir and (self.num_evals - 1) % every == 0:
            with self.stopwatch.time("video"):
                self._record_video(env_steps)
        if self._callbacks and self._callbacks.evaluation(
            Evaluation(
                env_steps=int(env_steps),
                returns=np.asarray(returns),
                mean_return=self.last_return,
                num_evals=self.num_evals,
                wall_s=time.monotonic() - self._start,
                params=getattr(getattr(self._actor, "_client", None), "params", None),
                params_version=self._actor.params_version,
                run_dir=self._config.run.dir,
            )
        ):
            return True
        return self.solved

    def play_against(self, pool: Any, policy: Any = None) -> None:
        """A self-play run: the evaluation env's snapshot opponents play ``pool`` with ``policy``
        (default: the agent's acting policy, made here)."""
        if policy is None:
            spec = make_environment_spec(self._env)
            policy = self._config.builder.make_policy(self._config.make_networks(spec), spec, False)
        self._env.play_against(pool, policy)

    def _win_rates(self, returns: np.ndarray) -> dict[str, float] | None:
        """The share of games won (return > 0) against each opponent of ``shoal.envs.selfplay``:
        the evaluation's own (a lookahead player: ``returns``), a random player and the pool
        (``None``: a stopping run interrupted them)."""
        rates, default = {}, self._env.opponent
        try:
            for opponent in OPPONENTS:
                games: np.ndarray | None = returns
                if opponent != default:
                    self._env.opponent = opponent
                    games = evaluate(
                        self._env,
                        self._actor,
                        should_stop=self._should_stop,
                        seed=self._config.run.seed + EVAL_SEED_OFFSET + 7919 * self.num_evals,
                    )
                    if games is None:  # (a stopping run)
                        return None
                rates[f"eval_win_rate_{opponent}"] = float(np.mean(np.asarray(games) > 0))
            rates["self_play_snapshots"] = len(self._env.pool.snapshots)  # (the pool's opponents: how many)
        finally:
            self._env.opponent = default
        return rates

    def _record_video(self, env_steps: int) -> None:
        """One episode of the evaluation policy, to ``<run_dir>/videos/eval-<env steps>.mp4``
        and to TensorBoard (``tb/eval``, an animated GIF; ``shoal.envs.video``); a failure is one
        warning line, and no more videos are tried. A frame that takes longer than
        ``SHOAL_STEP_TIMEOUT_S`` (a renderer that hangs) is such a failure."""
        config = self._config
        try:
            if self._video is None:
                env, render = video_env(config, config.run.seed + EVAL_SEED_OFFSET)
                spec = make_environment_spec(env)
                policy = config.builder.make_policy(config.make_networks(spec), spec, True)
                actor = config.builder.make_actor(
                    self._key, policy, spec, self._source, None, asynchronous_updates=False
                )
                self._video = (env, actor, render)
                self._tensorboard_videos = TensorBoardVideos(os.path.join(config.run.dir, "tb", "eval"))
            env, actor, render = self._video
            actor.update(wait=True)
            frames, _ = record_episode_within(
                env,
                actor,
                config.run.seed + EVAL_SEED_OFFSET + 7919 * self.num_evals,
                render,
                value("SHOAL_STEP_TIMEOUT_S"),
            )
            directory = os.path.join(config.run.dir, "videos")
            make_dirs(directory)
            write_atomic(os.path.join(directory, f"eval-{env_steps:09d}.mp4"), encode_mp4(frames))
            self._tensorboard_videos.add(frames, env_steps)
        except Exception as e:  # noqa: BLE001 -- a video never stops training
            if isinstance(e, TimeoutError):
                self._video = None  # (its env hangs in a thread: left, never closed)
            print(
                f"shoal: warning: no evaluation video ({type(e).__name__}: {e}); no more will be tried",
                file=sys.stderr,
                flush=True,
            )
            self._videos_on = False

    def save(self) -> dict[str, Any]:
        """The evaluation schedule: where the next evaluation falls, and what the last found."""
        return {
            "next": self._next,
            "num_evals": self.num_evals,
            "last_return": self.last_return,
            "last_at": self.last_at,
            "eval_s": self.eval_s,
        }

    def restore(self, state: dict[str, Any]) -> None:
        self._next, self.num_evals = int(state["next"]), int(state["num_evals"])
        self.last_return, self.last_at = state["last_return"], int(state["last_at"])
        self.eval_s = self._eval_s_before = float(state["eval_s"])

    def result(self, env_steps: int, learner_steps: int, wall_s: float) -> dict[str, Any]:
        """The run's summary: the fields of the final JSON line (with the env's ``protocol``,
        for Atari; ``stopped_by``: the callback that ended the run), handed to the callbacks'
        ``on_end``. ``wall_s`` is this launch's (a resumed run's own), and so are ``eval_s``
        and ``train_s`` (``wall_s - eval_s``); ``num_evals`` and the counts are the run's."""
        eval_s = self.eval_s - self._eval_s_before
        result = {
            "agent": self._config.builder.name,
            "env": self._config.env.id,
            "seed": self._config.run.seed,
            "solved": self.solved,
            "env_steps": int(env_steps),
            "wall_s": round(wall_s, 3),
            "train_s": round(wall_s - eval_s, 3),
            "eval_s": round(eval_s, 3),
            "final_eval_return": self.last_return,
            "learner_steps": int(learner_steps),
            "num_evals": self.num_evals,
        }
        protocol = env_protocol(self._config.env.id, self._config.env.sticky_actions)
        if protocol:
            result["protocol"] = protocol
        if self._callbacks.stopped_by:
            result["stopped_by"] = self._callbacks.stopped_by
        self._callbacks.end(result)
        return result

    def close(self) -> None:
        self._logger.close()
        self._env.close()
        if self._video is not None:
            self._video[0].close()
        if self._tensorboard_videos is not None:
            self._tensorboard_videos.close()


def next_evaluation(due_at: int, env_steps: int) -> str:
    """``next evaluation at N env steps``, or that it is due at once (the checkpoint was taken
    after its step count, before it ran)."""
    if due_at <= env_steps:
        return f"next evaluation at once (it was due at {due_at:,} env steps)"
    return f"next evaluation at {due_at:,} env steps"
