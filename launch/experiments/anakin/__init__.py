"""The compiled loop (``--launcher anakin``; Hessel et al., 2021, *Podracer architectures*): for a
JAX env (``shoal.envs.jax_envs``), the env steps, the policy and PPO's update are one jitted
function, sharded over the local devices.

One *iteration* rolls out ``rollout_length`` (``T``) steps of ``num_envs`` (``N``) vmapped envs
with ``lax.scan``, acting with PPO's own policy (``builder.make_policy``), and hands the rollout,
laid out as the replay path's batches (``[N, T, ...]``: observation, next observation, action,
reward, terminated, truncated, the policy's extras), to PPO's own update
(``learning.make_update(networks, config, builder.loss)``: the same loss, GAE, schedules and
optimizer as the replay-backed learner; nothing copied). One *dispatch* runs as many iterations
as fit between two evaluations (``eval_every`` env steps) in a ``fori_loop``: the host sees the
device only there, to log a row and evaluate. With more than one local device the envs are split
over them (``shard_map`` on the learner's mesh, ``shoal.learners.placement``): each device steps
``N / devices`` envs and the update all-reduces its gradients, as the learner's does.

Evaluation plays ``eval_episodes`` envs greedily (PPO's evaluation policy) to their first
episode's end, in one jitted ``while_loop``. A run writes ``config.json``, the CSV logs
(``train``, ``learner``, ``eval``) and ``result.json`` in its run directory, and returns the
result line the other runners return (with ``"launcher": "anakin"``). It checkpoints every
``checkpoint_every_s`` and at its end (at a dispatch's end: ``checkpoints``), and a resumed
run continues exactly. Its callbacks are called at each evaluation and at its end (on the host,
between dispatches), ``--track`` sends its logs, and ``load_policy``, ``shoal evaluate`` (in this
evaluation, ``anakin.evaluation``: the run's numbers back for its seeds), ``export``, ``status``,
``compare`` and ``record`` read its run directory.

DQN and SAC run in it too (``anakin.dqn``, ``anakin.sac``; their shared loop ``anakin.off_policy``):
each iteration steps the envs with the agent's own acting policy into a replay ring held on the
device (``anakin.buffer``: uniform or, for DQN, prioritized draws of n-step windows), then the
agent's own update at its replay ratio. An agent's part is a ``Loop`` (``anakin.loop``: its first
carry, iteration and sharding). Recurrent PPO (``lstm_size``) carries each env's LSTM state in
the carry (``runner.make_iteration``). Not yet: videos.
"""

from shoal.launch.experiments.anakin.runner import check_anakin, run_anakin

__all__ = ["check_anakin", "run_anakin"]
