"""How far behind the learner the params that acted a batch were, and PPO's rule on it.

Actors record the learner version they acted with in ``extras["policy_version"]``. A batch's
policy lag is ``learner version - min(policy_version)``. ``PolicyLag`` is a ``keep_batch`` rule
for ``ReplicatedLearner``: it logs the lag (``policy_lag`` in the learner's rows) and, given a
``max_lag``, drops a batch whose lag exceeds it (counted as ``stale_batches_dropped``): an
on-policy agent (PPO) must not train on rollouts from params too many updates old. V-trace
(IMPALA) corrects for the lag instead, so IMPALA only logs it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shoal.core.counting import Counter
from shoal.core.types import Sample


class PolicyLag:
    def __init__(self, max_lag: int | None = None, counter: Counter | None = None) -> None:
        self.max_lag, self._counter = max_lag, counter
        self.last: int | None = None  # the lag of the last batch
        self.dropped = 0

    def __call__(self, sample: Sample, version: int) -> bool:
        self.last = int(version - np.min(sample.data["extras"]["policy_version"]))
        if self.max_lag is None or self.last <= self.max_lag:
            return True
        self.dropped += 1
        if self._counter is not None:
            self._counter.increment(stale_batches_dropped=1)
        return False

    def metrics(self) -> dict[str, Any]:
        return {} if self.last is None else {"policy_lag": self.last}
