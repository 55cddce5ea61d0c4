"""The RL experiments, on top of the program layer (``shoal.launch.programs``).

At the top, what every run shares:

* ``config`` -- ``ExperimentConfig``, the single input of both runners; its groups
  (``config_groups``); ``config.json``'s layout by schema version is ``run_directory/config_record``;
* ``runner`` -- ``run_experiment``: one process (actor, replay, learner, evaluator);
* ``resuming`` -- ``resume_experiment``, above both runners;
* ``evaluation``, ``pacing``, ``interrupts``, ``callbacks`` -- evaluating, pacing the learner
  against the actors, taking signals, and the user's hooks;
* ``trained`` / ``exporting`` -- a trained policy out of its run (``load_policy``, ``evaluate``,
  ``export``);
* ``tracking`` / ``trackers`` -- W&B and MLflow; ``compilation_cache``, ``quiet`` -- the
  command line's JAX cache and its quiet terminal.

Its rooms:

* ``run_directory/`` -- a run's directory: owning it (``directory``), claiming and reading it
  back (``claim``), its state files' schemas (``schemas``; ``config_record``: config.json's
  versions), its ``checkpoints`` and ``replay_checkpoints``;
* ``distributed/`` -- the run as a program: ``launch`` (``run_distributed_experiment``),
  ``settings`` (``LaunchSettings``), ``preflight``, the ``program``'s graph, its nodes
  (``workers``, ``learner_worker``, ``replay_node``, ``shared_params``, ``step_grants``), the
  ``driver`` and the ``autoscale`` rule and loop;
* ``cli/`` -- the ``shoal`` command line: ``main``, ``arguments``, ``commands``, ``status``,
  ``compare`` and its ``aggregates``;
* ``formats/`` -- files for other tools: ``onnx_model`` (``shoal export --format onnx``),
  ``minari_dataset`` (``shoal record``).
"""
