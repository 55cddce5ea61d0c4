"""``shoal tune``: Optuna studies over an agent's settings, each trial Shoal's own one-process
training (the ``tune`` extra: ``pip install 'shoal[tune]'``).

* ``spaces``: search spaces (``DEFAULT_SPACES`` per agent, ``--space`` files) and their checks;
* ``study``: the tune directory (``tune.json``, ``study.db``) and the checks before it is written;
* ``trials``: a trial's seeds under ``run_experiment``, pruned at evaluations by a callback;
* ``on_ray``: ``--launcher ray``, trials as Ray tasks, the study served by an actor here;
* ``report``: ``trials.csv``, ``summary.md``, ``best_preset.json``, ``importance.png``, and
  ``shoal status DIR``'s lines;
* ``command``: the ``shoal tune`` command line, and ``run_tune``, the same from Python::

    from shoal.launch.experiments.tune import run_tune

    summary = run_tune("dqn", "CartPole-v1", trials=12, seeds=(0, 1), out="runs/tune-dqn",
                       space={"learning_rate": {"low": 1e-4, "high": 1e-2, "log": True}},
                       max_env_steps=20_000, eval_every=2_000)

Optuna is imported only when a tune runs or is read (this package imports without it).
"""

from shoal.launch.experiments.tune.command import run_tune

__all__ = ["run_tune"]
