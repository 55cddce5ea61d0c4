"""The shared vocabulary every other Shoal package depends on (numpy and gymnasium only)."""

from shoal.core.counting import Counter
from shoal.core.interfaces import Actor, Adder, Learner, Saveable, VariableSource
from shoal.core.specs import EnvironmentSpec, make_environment_spec
from shoal.core.types import Transition

__all__ = [
    "Actor", "Adder", "Counter", "EnvironmentSpec", "Learner", "Saveable", "Transition",
    "VariableSource", "make_environment_spec",
]
