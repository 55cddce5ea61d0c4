"""Aggregate scores over seeds and tasks, with stratified-bootstrap confidence intervals (after
Agarwal et al., 2021, "Deep RL at the edge of the statistical precipice", and its ``rliable``).

Scores come as ``{task: [one score per run]}`` (runs per task may differ). The aggregates:

* ``iqm``: the interquartile mean of all scores pooled: the mean of the middle 50% once sorted,
  with ``floor(n / 4)`` scores cut from each end (``scipy.stats.trim_mean(x, 0.25)``, as rliable);
  robust to an outlier seed, less noisy than the median;
* ``mean``, ``median`` of the pooled scores;
* ``optimality_gap``: ``mean(max(gamma - score, 0))``: how far runs fall short of ``gamma``
  (1 for normalized scores: the target), lower is better, and a run beyond the target earns
  nothing for it.

``bootstrap_ci`` resamples the runs of each task with replacement, each task apart (stratified:
every resample keeps each task's number of runs), and takes the percentile interval of the
aggregate over the resamples (at most ``MAX_SAMPLES`` of them; scores must be finite). ``normalized`` puts a task's returns on a common scale first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

Scores = Mapping[str, Sequence[float] | np.ndarray]
MAX_SAMPLES = 100_000  # (resamples of one interval: 50 times the default, seconds of work)


def iqm(scores: Sequence[float] | np.ndarray) -> float:
    """The interquartile mean: ``floor(n / 4)`` scores cut from each end of the sorted scores."""
    x = np.sort(np.asarray(scores, np.float64).ravel())
    cut = int(0.25 * x.size)
    return float(np.mean(x[cut : x.size - cut]))


def optimality_gap(scores: Sequence[float] | np.ndarray, gamma: float = 1.0) -> float:
    """``mean(max(gamma - score, 0))``."""
    return float(gamma - np.mean(np.minimum(np.asarray(scores, np.float64), gamma)))


AGGREGATES: dict[str, Callable[[np.ndarray], float]] = {
    "iqm": iqm,
    "mean": lambda x: float(np.mean(x)),
    "median": lambda x: float(np.median(x)),
    "optimality_gap": optimality_gap,
}


def pooled(scores: Scores) -> np.ndarray:
    """Every task's scores in one array."""
    return np.concatenate([np.asarray(s, np.float64).ravel() for s in scores.values()])


def bootstrap_ci(
    scores: Scores,
    aggregate: Callable[[np.ndarray], float],
    samples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``(point, low, high)``: ``aggregate`` of the pooled scores, and its stratified-bootstrap
    percentile interval (``samples`` resamples, ``seed``: a fixed answer for fixed scores)."""
    tasks = [np.asarray(s, np.float64).ravel() for s in scores.values()]
    if not tasks or any(t.size == 0 for t in tasks):
        raise ValueError("every task needs at least one score")
    if not all(np.isfinite(t).all() for t in tasks):
        raise ValueError("every score must be finite (not NaN or infinite)")
    if isinstance(samples, bool) or not isinstance(samples, (int, np.integer)) or not 1 <= samples <= MAX_SAMPLES:
        raise ValueError(f"bootstrap samples must be in [1, {MAX_SAMPLES:,}], got {samples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    rng = np.random.default_rng(seed)
    picks = [rng.integers(0, t.size, (samples, t.size)) for t in tasks]  # [samples, runs of the task]
    values = np.array([aggregate(np.concatenate([t[p[i]] for t, p in zip(tasks, picks)])) for i in range(samples)])
    tail = (1.0 - confidence) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail])
    return aggregate(pooled(scores)), float(low), float(high)


def normalized(returns: Sequence[float], low: float, high: float) -> np.ndarray:
    """``(return - low) / (high - low)``: 0 at ``low``, 1 at ``high`` (a task's target)."""
    if not (np.isfinite(low) and np.isfinite(high) and high > low):
        raise ValueError(f"normalizing needs finite low < high, got low={low}, high={high}")
    return (np.asarray(returns, np.float64) - low) / (high - low)
