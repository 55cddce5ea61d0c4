"""The shared vocabulary every other Shoal package depends on (numpy and gymnasium only).

The names load on first use, so that a module of this package that needs neither (e.g.
``shoal.core.files``, which the program layer uses) imports without them.
"""

import importlib
from typing import Any

_LAZY = {
    "Counter": "counting",
    "Actor": "interfaces",
    "Adder": "interfaces",
    "Learner": "interfaces",
    "Saveable": "interfaces",
    "VariableSource": "interfaces",
    "ArraySpec": "specs",
    "EnvironmentSpec": "specs",
    "make_environment_spec": "specs",
    "ActorInfo": "types",
    "Policy": "types",
    "Step": "types",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"shoal.core.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'shoal.core' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
