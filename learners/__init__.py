"""Learners: the data-parallel learner and the update-function contract."""

from shoal.learners.replicated import DevicePrefetcher, Placement, ReplicatedLearner
from shoal.learners.updates import (
    AXIS_NAME,
    UpdateFn,
    UpdateOutput,
    minibatch_epochs,
    scan_sgd_steps,
    sequence_minibatch_epochs,
)

__all__ = [
    "AXIS_NAME",
    "DevicePrefetcher",
    "Placement",
    "ReplicatedLearner",
    "UpdateFn",
    "UpdateOutput",
    "minibatch_epochs",
    "scan_sgd_steps",
    "sequence_minibatch_epochs",
]
