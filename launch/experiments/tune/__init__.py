"""``shoal tune``: Optuna studies over an agent's settings, each trial Shoal's own one-process
training (the ``tune`` extra: ``pip install 'shoal[tune]'``).

* ``spaces``: search spaces (``DEFAULT_SPACES`` per agent, ``--space`` files) and their checks;
* ``study``: the tune directory (``tune.json``, ``study.db``) and the checks before it is written;
* ``trials``: a trial's seeds under ``run_experiment``, pruned at evaluations by a callback;
* ``report``: ``trials.csv``, ``summary.md``, ``best_preset.json``, ``importance.png``, and
  ``shoal status DIR``'s lines;
* ``command``: the ``shoal tune`` command line.

Optuna is imported only when a tune runs or is read (this package imports without it).
"""
