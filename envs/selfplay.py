"""Self-play for two-player turn-based games (PettingZoo AEC envs: ``shoal train --self-play``).

``SelfPlayRows`` steps ``num_copies`` copies of the game as a vector env of one row per copy:
the **learner's seat**. In each copy the learner plays one of the two seats, the first and the
second in turn from episode to episode (copy ``c``'s episode ``e``: seat ``(c + e) % 2``), and
an **opponent** plays the other. A row's step is one move of the learner; the opponent's
replies are played inside it, so the next observation is the learner's next turn. The step's
reward is the learner's (PettingZoo's ``rewards[seat]`` after its move and after each reply:
+1 a win, -1 a loss, 0 a draw in the classic games); a row ends when the game does, and the
copy starts its next game in the same step (``info["final_obs"]``), the opponent moving first
where the learner's new seat is the second.

Opponents (``opponent``):

* ``"pool"`` (training): at the start of each game, a frozen **snapshot** of the learner's
  parameters from a ``SnapshotPool``, the latest with probability 1/2, else one of the pool
  drawn uniformly, acting with the agent's acting policy (``play_against``) as at the end of
  its exploration schedule (DQN's final epsilon; PPO samples its policy). Before the first
  snapshot, a random player;
* ``"random"``: a legal move drawn uniformly;
* ``"lookahead"``: a one-step lookahead player: a move that wins at once if there is one, else a
  move after which the other side has no winning reply (tried on copies of the game), else any
  legal move; ties drawn at random. The evaluation plays it, and the evaluator also reports the
  win rate against each opponent (``eval_win_rate_<opponent>``).

The pool (``SnapshotPool``, ``shoal.envs.snapshot_pool``) takes a snapshot every ``every``
learner updates and keeps the latest ``size``; each checkpoint saves it (``save``: arrays only, a
file its ``run.json`` names) and a resume restores it. It lives beside the learner; in a
distributed run the learner node serves it and each actor and the evaluator play a
``PoolMirror`` of it, synced twice a second (the evaluator's before each evaluation).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any, cast

import gymnasium as gym
import jax
import numpy as np

from shoal.core.specs import ACTION_MASK
from shoal.core.types import ActorInfo
from shoal.envs.observations import allowed_actions
from shoal.envs.snapshot_pool import PoolMirror, SnapshotPool

OPPONENTS = ("random", "lookahead", "pool")
SCHEDULES_DONE = 2**30  # (the env steps a snapshot acts at: its exploration schedule at its end, e.g. DQN's epsilon)


class SelfPlayRows(gym.vector.VectorEnv):
    """``num_copies`` copies of a two-player turn-based game, one row per copy: the learner's
    seat (see the module docstring). ``make()`` makes one PettingZoo AEC env."""

    def __init__(
        self,
        make: Callable[[], Any],
        num_copies: int,
        seed: int | None = None,
        opponent: str = "pool",
        name: str = "the game",
    ) -> None:
        if num_copies < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_copies}")
        self.name = name
        self.envs = [make() for _ in range(num_copies)]
        first = self.envs[0]
        self.seats = list(first.possible_agents)
        if len(self.seats) != 2:
            raise ValueError(f"{name}: self-play takes two-player games; it has {len(self.seats)} agents")
        spaces = [first.observation_space(a) for a in self.seats]
        actions = [first.action_space(a) for a in self.seats]
        if spaces[0] != spaces[1] or actions[0] != actions[1] or not isinstance(actions[0], gym.spaces.Discrete):
            raise ValueError(
                f"{name}: self-play takes games whose two players have the same observation space "
                f"and the same Discrete action space; got {spaces} and {actions}"
            )
        space = spaces[0]
        if isinstance(space, gym.spaces.Dict) and ACTION_MASK in space.spaces:
            space = gym.spaces.Dict(
                {**space.spaces, ACTION_MASK: gym.spaces.Box(0, 1, space[ACTION_MASK].shape, np.int8)}
            )
        self.single_observation_space = space
        self.single_action_space = actions[0]
        self.num_envs = num_copies
        self.observation_space = gym.vector.utils.batch_space(space, num_copies)
        self.action_space = gym.vector.utils.batch_space(actions[0], num_copies)
        self.metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
        self.render_mode = None
        self.opponent = opponent
        self.pool: SnapshotPool | None = None
        self._policy: Any = None
        self._seed = seed
        self._rng = np.random.default_rng(seed)
        self._key = jax.random.PRNGKey(0 if seed is None else seed)
        self._episodes = [0] * num_copies
        self._players: list[Any] = [None] * num_copies  # (each copy's opponent this game)
        self._carry = np.zeros(num_copies)  # (rewards of the opponent's opening moves, for the next step)

    def play_against(self, pool: SnapshotPool, policy: Any) -> None:
        """Opponents ``"pool"`` play ``pool``'s snapshots with ``policy`` (the agent's acting
        ``Policy``; feed-forward)."""
        if policy.initial_state is not None:
            raise ValueError("self-play takes a feed-forward policy (its snapshots act without a recurrent state)")
        self.pool, self._policy = pool, (jax.jit(policy.apply), policy)

    # -- the games -------------------------------------------------------------------------------
    def _seat(self, c: int) -> str:
        return self.seats[(c + self._episodes[c]) % 2]

    def _over(self, c: int) -> bool:
        env, seat = self.envs[c], self._seat(c)
        return not env.agents or env.terminations.get(seat, False) or env.truncations.get(seat, False)

    def _observe(self, c: int, seat: str) -> Any:
        obs = self.envs[c].observe(seat)
        if isinstance(obs, Mapping) and ACTION_MASK in obs:
            obs = {**obs, ACTION_MASK: allowed_actions(obs[ACTION_MASK])}
        return obs

    def _choose_opponent(self, c: int) -> None:
        if self.opponent == "pool":
            self._players[c] = self.pool.sample(self._rng) if self.pool and self.pool.snapshots else "random"
        else:
            self._players[c] = self.opponent

    def _reset_copy(self, c: int, seed: int | None) -> None:
        self.envs[c].reset(seed=seed)
        self._choose_opponent(c)

    def _replies(self, copies: list[int], rewards: np.ndarray) -> None:
        """The opponents' moves, until each of ``copies`` is at the learner's turn or over."""
        while True:
            waiting = [c for c in copies if not self._over(c) and self.envs[c].agent_selection != self._seat(c)]
            if not waiting:
                return
            for c, action in zip(waiting, self._opponent_moves(waiting)):
                self.envs[c].step(int(action))
                rewards[c] += float(self.envs[c].rewards.get(self._seat(c), 0.0))

    def _opponent_moves(self, copies: list[int]) -> list[int]:
        moves: dict[int, int] = {}
        snapshots: dict[int, tuple[Any, list[int]]] = {}  # version -> (params, copies)
        for c in copies:
            player = self._players[c]
            if player == "random":
                moves[c] = self._random_move(c)
            elif player == "lookahead":
                moves[c] = self._lookahead_move(c)
            else:
                snapshots.setdefault(player[0], (player[1], []))[1].append(c)
        if snapshots:  # (each snapshot acts once, on every copy's position: one shape to compile)
            obs = _stack([self._observe(c, self.envs[c].agent_selection) for c in range(self.num_envs)])
        for version, (params, rows) in snapshots.items():
            apply, _ = self._policy
            self._key, key = jax.random.split(self._key)
            actions, _, _ = apply(params, key, obs, ActorInfo(SCHEDULES_DONE, version))
            actions = np.asarray(actions)
            for c in rows:
                moves[c] = int(actions[c])
        return [moves[c] for c in copies]

    def _legal(self, env: Any) -> np.ndarray:
        obs = env.observe(env.agent_selection)
        mask = obs.get(ACTION_MASK) if isinstance(obs, Mapping) else None
        return (
            np.flatnonzero(mask)
            if mask is not None
            else np.arange(cast(gym.spaces.Discrete, self.single_action_space).n)
        )

    def _random_move(self, c: int) -> int:
        return int(self._rng.choice(self._legal(self.envs[c])))

    def _lookahead_move(self, c: int) -> int:
        env = self.envs[c]
        mover = env.agent_selection
        legal = self._legal(env)
        safe = []
        for action in legal:
            after = _clone(env)
            after.step(int(action))
            if after.rewards.get(mover, 0) > 0:
                return int(action)  # (it wins now)
            if not after.agents or after.terminations.get(mover, False):
                safe.append(action)
                continue
            other = after.agent_selection
            if not any(_wins(after, other, reply) for reply in self._legal(after)):
                safe.append(action)
        return int(self._rng.choice(safe if safe else legal))

    # -- the vector env --------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        seed = self._seed if seed is None else seed
        if seed is not None:  # (a seeded reset starts over: the same seats, opponents and draws)
            self._rng = np.random.default_rng(seed)
            self._key = jax.random.PRNGKey(seed)
            self._episodes = [0] * self.num_envs
        self._carry[:] = 0.0
        for c in range(self.num_envs):
            self._reset_copy(c, None if seed is None else seed + c)
        self._replies(list(range(self.num_envs)), self._carry)
        return self._batch(), {}

    def step(self, actions):
        rewards, self._carry = self._carry, np.zeros(self.num_envs)
        for c, env in enumerate(self.envs):
            env.step(int(actions[c]))
            rewards[c] += float(env.rewards.get(self._seat(c), 0.0))
        self._replies(list(range(self.num_envs)), rewards)
        terminated = np.zeros(self.num_envs, bool)
        truncated = np.zeros(self.num_envs, bool)
        final: list[Any] = [None] * self.num_envs
        ended = [c for c in range(self.num_envs) if self._over(c)]
        for c in ended:
            seat, env = self._seat(c), self.envs[c]
            truncated[c] = bool(env.truncations.get(seat, False)) and not env.terminations.get(seat, False)
            terminated[c] = not truncated[c]
            final[c] = self._observe(c, seat)
            self._episodes[c] += 1
            self._reset_copy(c, None)
        self._replies(ended, self._carry)
        info: dict[str, Any] = {}
        if ended:
            info["final_obs"] = np.array(final + [None], dtype=object)[:-1]
            info["_final_obs"] = terminated | truncated
        return self._batch(), rewards, terminated, truncated, info

    def _batch(self) -> Any:
        return _stack([self._observe(c, self._seat(c)) for c in range(self.num_envs)])

    def render(self) -> Any:
        """The first copy's board (its ``render()``; made with ``render_mode``, an env argument):
        after each of the learner's moves, the opponent's reply made."""
        return self.envs[0].render()

    def close_extras(self, **kwargs: Any) -> None:
        for env in self.envs:
            env.close()


def _stack(rows: list[Any]) -> Any:
    """Rows of observations (arrays, or dicts of them) as one batch."""
    if isinstance(rows[0], Mapping):
        return {k: np.stack([row[k] for row in rows]) for k in rows[0]}
    return np.stack(rows)


def _clone(env: Any) -> Any:
    """A copy of ``env``'s state (its wrappers' too, through their ``env``). Not ``deepcopy``:
    PettingZoo's envs pickle as their constructor's arguments (``EzPickle``), a fresh game."""
    twin = object.__new__(type(env))
    twin.__dict__.update(
        {
            key: _clone(value) if key == "env" else value if _fixed(value) else copy.deepcopy(value)
            for key, value in vars(env).items()
        }
    )
    return twin


def _fixed(value: Any) -> bool:
    """What a game's step never changes and a clone shares: spaces (slow to copy), a dict of them."""
    if isinstance(value, gym.spaces.Space):
        return True
    return isinstance(value, dict) and bool(value) and all(isinstance(v, gym.spaces.Space) for v in value.values())


def _wins(env: Any, mover: str, action: int) -> bool:
    after = _clone(env)
    after.step(int(action))
    return after.rewards.get(mover, 0) > 0


__all__ = ["OPPONENTS", "PoolMirror", "SelfPlayRows", "SnapshotPool"]
