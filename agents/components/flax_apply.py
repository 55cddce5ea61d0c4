"""``apply_network``: a flax module's output, typed as what the agents get from it.

flax types ``Module.apply`` as the output *or* ``(output, mutated variables)`` (the latter only
with ``mutable=...``, which no Shoal agent passes); this wrapper calls it unchanged and gives the
type checker the output alone.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn

from shoal.core.types import Params


def apply_network(network: nn.Module, params: Params, *args: Any, method: str | None = None) -> Any:
    """``network.apply(params, *args, method=method)`` (``method=None``: ``__call__``)."""
    return network.apply(params, *args, method=method)
