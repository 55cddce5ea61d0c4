"""Training from a dataset (``shoal train --dataset PATH``): replay filled once with the agent's
own items, then, for an offline agent (``bc``, ``cql``: ``builder.offline``), a learner that
trains from replay alone while the evaluator still plays the env; for an online agent (``dqn``,
``sac``), the same filling seeds replay before its actor starts (offline-to-online).

**Filling.** The dataset's episodes are laid end to end and cut into ``num_envs`` contiguous
lanes of equal length (the run's vector env's width, which replay items are shaped by); the
agent's adder (``make_adder``: n-step transitions for DQN, CQL and SAC, single transitions for
BC) takes the lanes' steps as it takes a vector env's. An adder never joins steps across an
episode's end, so a lane that starts or ends mid-episode loses only its last ``n - 1`` steps,
and ``steps mod num_envs`` steps are left out at the end (the JSON line of the run counts
them: ``dataset.transitions``).

**The offline clock.** An offline run steps no env for training: its ``max_env_steps`` and
``eval_every`` count learner SGD steps (``learner_steps``), and so do ``eval.csv``'s and the
checkpoints' ``env_steps``; the result's ``env_steps`` is 0. Checkpoints hold replay (the
dataset's items) with the learner, so ``--resume`` reads no dataset again.
"""

from shoal.launch.experiments.offline.filling import (
    check_dataset_settings,
    fill_replay,
    is_offline,
    load_dataset,
    require_dataset,
)
from shoal.launch.experiments.offline.training import train_offline

__all__ = ["check_dataset_settings", "fill_replay", "is_offline", "load_dataset", "require_dataset", "train_offline"]
