"""Callbacks: a user's code called by a run at its evaluations and at its end.

``ExperimentConfig(callbacks=[...])`` takes objects with either or both of these methods (the
``Callback`` base class has both, doing nothing)::

    class StopAt(Callback):
        def on_evaluation(self, evaluation):      # after each evaluation
            return evaluation.mean_return >= 200   # True: end the run now

        def on_end(self, result):                  # once, with the run's summary
            print(result["final_eval_return"])

They are called in the process that evaluates: the run's own process, or a distributed run's
evaluator node (the config travels there pickled, so a callback's class must be importable or
defined where cloudpickle can carry it, e.g. a script's ``__main__``). A callback that raises is
one warning line on stderr, is not called again, and the run goes on. ``on_evaluation``
returning ``True`` ends the run as a reached target does (``solved`` stays false; the result
says ``"stopped_by"``: the callback's class name).

A callback that leaves as a script would (``sys.exit(...)``: ``SystemExit``) never ends the
process: from ``on_evaluation`` it ends the run as returning ``True`` does (the last checkpoint,
the result and its line are written as for any end; ``stopped_by`` names it; the exit status is a
finished run's, 0), with one warning line naming the callback and what it raised; from
``on_end`` (the run has ended) it is one warning line, and the result stands. In both runners: a
distributed run's evaluator ends the run so. A ``KeyboardInterrupt`` (Ctrl-C while a callback
runs: from Python or a notebook, that is the user's, not the callback's) is not caught: it
interrupts the run as it would anywhere else in it (``run_experiment`` raises it, closing what
the run opened, with no result). Callbacks are code: ``config.json`` does not
record them, and a resume runs the ones it is given again (``resume_experiment(...,
callbacks=[...])``).
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import numpy as np

HOOKS = ("on_evaluation", "on_end")
_LEFT = object()  # (what ``Callbacks._call`` returns for a callback that left: sys.exit)


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """What one evaluation found.

    Attributes:
      env_steps: the run's env steps when it ran.
      returns: each episode's return (``eval_episodes`` of them).
      mean_return: their mean (``eval.csv``'s ``eval_return``).
      num_evals: evaluations so far, this one included.
      wall_s: seconds since the run started.
      params: the parameters it evaluated (host arrays; e.g. to save the best policy), or
        ``None`` where the actor does not expose them.
      params_version: the learner version of ``params``.
      run_dir: the run's directory (``None``: a run that writes nothing).
    """

    env_steps: int
    returns: np.ndarray
    mean_return: float
    num_evals: int
    wall_s: float
    params: Any
    params_version: int
    run_dir: str | None


class Callback:
    """A base class with every hook, each doing nothing (override what you need)."""

    def on_evaluation(self, evaluation: Evaluation) -> bool | None:
        """After each evaluation; ``True`` ends the run."""
        return None

    def on_end(self, result: dict[str, Any]) -> None:
        """Once, when the run ends, with its summary (the result line's fields)."""


def check_callbacks(callbacks: Any) -> None:
    """Raises ``ValueError`` unless ``callbacks`` is a list of objects with a hook each."""
    if not isinstance(callbacks, (list, tuple)):
        raise ValueError(f"callbacks must be a list of callback objects, got {type(callbacks).__name__}")
    for callback in callbacks:
        if not any(callable(getattr(callback, hook, None)) for hook in HOOKS):
            raise ValueError(
                f"callback {callback!r} has none of the hooks {', '.join(HOOKS)} "
                "(subclass shoal.launch.experiments.callbacks.Callback)"
            )


class Callbacks:
    """A run's callbacks, called in order; one that raised is not called again."""

    def __init__(self, callbacks: list[Any]) -> None:
        self._live = list(callbacks)
        self.stopped_by: str | None = None

    def __bool__(self) -> bool:
        return bool(self._live)

    def evaluation(self, evaluation: Evaluation) -> bool:
        """Calls every ``on_evaluation``; whether one asked to end the run (returned ``True``,
        or left: ``sys.exit``)."""
        stop = False
        for callback in list(self._live):
            if self._call(callback, "on_evaluation", evaluation) in (True, _LEFT) and not stop:
                stop, self.stopped_by = True, type(callback).__name__
        return stop

    def end(self, result: dict[str, Any]) -> None:
        for callback in list(self._live):
            self._call(callback, "on_end", dict(result))

    def _call(self, callback: Any, hook: str, argument: Any) -> Any:
        method = getattr(callback, hook, None)
        if not callable(method):
            return None
        name = f"{type(callback).__name__}.{hook}"
        try:
            return method(argument)
        except Exception as e:  # noqa: BLE001 -- a user's callback never ends the run
            self._live.remove(callback)
            print(
                f"shoal: warning: callback {name} raised {type(e).__name__}: {e}; it is not called again",
                file=sys.stderr,
                flush=True,
            )
            return None
        except SystemExit as e:  # (sys.exit: the callback wants the run to end; a Ctrl-C is the user's: not caught)
            escape = type(e).__name__ + (f"({', '.join(map(repr, e.args))})" if e.args else "")
            if hook == "on_end":
                self._live.remove(callback)
                print(
                    f"shoal: warning: callback {name} raised {escape} as the run ended: ignored (the run's "
                    "result stands)",
                    file=sys.stderr,
                    flush=True,
                )
                return None
            print(
                f"shoal: warning: callback {name} raised {escape}: the run ends here, as if it returned True",
                file=sys.stderr,
                flush=True,
            )
            return _LEFT
