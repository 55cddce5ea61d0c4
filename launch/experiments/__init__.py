"""The RL experiments, on top of the program layer (``shoal.launch.programs``).

* ``config`` -- ``ExperimentConfig``, the single input of both runners;
* ``runner`` -- ``run_experiment``: one process (actor, embedded Reverb, learner, evaluator);
* ``distributed`` -- ``run_distributed_experiment``: the same as a program, driven from here;
* ``program`` / ``workers`` / ``replay_node`` -- that program's graph, its nodes' bodies, and
  the Reverb replay node;
* ``runs`` -- claiming a run directory, ``resume_experiment``;
* ``checkpointing``, ``evaluation``, ``shared_params`` -- what both runners share;
* ``cli`` / ``commands`` -- the ``shoal`` command line.
"""
