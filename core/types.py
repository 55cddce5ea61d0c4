"""Plain data types passed between actors, replay and learners."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

Params = Any  # a pytree of arrays
PRNGKey = Any


class Transition(NamedTuple):
    """An n-step transition, as stored in replay and trained on.

    ``reward`` is the n-step return ``sum_{k<m} gamma^k r_{t+k}`` and ``discount`` the factor
    the bootstrap value ``Q(next_observation)`` is multiplied by: ``gamma^m`` if the episode
    did not terminate within the ``m`` steps, else ``0`` (see ``shoal.replay.adders``).
    """

    observation: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    discount: np.ndarray
    next_observation: np.ndarray
