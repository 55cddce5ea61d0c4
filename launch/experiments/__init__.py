"""The RL experiments, on top of the program layer (``shoal.launch.programs``).

* ``config`` -- ``ExperimentConfig``, the single input of both runners;
* ``runner`` -- ``run_experiment``: one process (actor, embedded Reverb, learner, evaluator);
* ``distributed`` -- ``run_distributed_experiment``: the same as a program, driven from here;
* ``program`` / ``workers`` / ``replay_node`` -- that program's graph, its nodes' bodies, and
  the Reverb replay node;
* ``runs`` -- claiming a run directory and reading its run back; ``resuming`` -- ``resume_experiment``;
* ``launch_settings`` -- ``LaunchSettings``, a distributed run's launch (CLI, API, ``config.json``);
* ``preflight`` -- what a distributed run checks, once, before anything is written;
* ``checkpointing``, ``evaluation``, ``shared_params`` -- what both runners share;
* ``cli`` / ``commands`` -- the ``shoal`` command line.
"""
