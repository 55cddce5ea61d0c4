"""Learners: the data-parallel SGD skeleton and checkpointing."""

from shoal.learners.checkpoint import restore_checkpoint, save_checkpoint
from shoal.learners.sgd import AXIS_NAME, SGDLearner

__all__ = ["AXIS_NAME", "SGDLearner", "restore_checkpoint", "save_checkpoint"]
