"""Shoal: a reinforcement-learning actor-learner framework.

Packages (dependencies point one way, top to bottom):

* ``shoal.launch``   -- experiment configs, runners and the ``shoal`` CLI.
* ``shoal.agents``   -- one builder per algorithm (``shoal.agents.dqn``).
* ``shoal.actors``, ``shoal.learners``, ``shoal.replay`` -- the three moving parts.
* ``shoal.core``     -- the shared vocabulary: specs, types, interfaces, loggers, counters.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    """``shoal.load_policy``: a trained policy out of its run directory (``shoal.launch``'s)."""
    if name == "load_policy":
        from shoal.launch.experiments.trained_policy import load_policy  # lazy: `import shoal` stays light

        return load_policy
    raise AttributeError(f"module 'shoal' has no attribute {name!r}")
