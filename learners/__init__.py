"""Learners: the data-parallel learner and the update-function contract."""

from shoal.learners.replicated import DevicePrefetcher, ReplicatedLearner, shard
from shoal.learners.updates import (AXIS_NAME, UpdateFn, UpdateOutput, minibatch_epochs,
                                    scan_sgd_steps)

__all__ = ["AXIS_NAME", "DevicePrefetcher", "ReplicatedLearner", "UpdateFn", "UpdateOutput",
           "minibatch_epochs", "scan_sgd_steps", "shard"]
