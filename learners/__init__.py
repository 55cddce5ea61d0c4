"""Learners: the data-parallel learner, the update-function contract, and checkpointing."""

from shoal.learners.checkpoint import restore_checkpoint, save_checkpoint
from shoal.learners.replicated import DevicePrefetcher, ReplicatedLearner, shard
from shoal.learners.updates import (AXIS_NAME, UpdateFn, UpdateOutput, minibatch_epochs,
                                    scan_sgd_steps)

__all__ = ["AXIS_NAME", "DevicePrefetcher", "ReplicatedLearner", "UpdateFn", "UpdateOutput",
           "minibatch_epochs", "restore_checkpoint", "save_checkpoint", "scan_sgd_steps", "shard"]
