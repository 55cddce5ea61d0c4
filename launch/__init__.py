"""Launch: experiment configs, the runners, and the ``shoal`` command line."""

from shoal.launch.experiment import ExperimentConfig, run_experiment

__all__ = ["ExperimentConfig", "run_experiment"]
