"""The shared vocabulary every other Shoal package depends on (numpy and gymnasium only)."""

from shoal.core.counting import Counter
from shoal.core.interfaces import Actor, Adder, Learner, Saveable, VariableSource
from shoal.core.specs import ArraySpec, EnvironmentSpec, make_environment_spec
from shoal.core.types import ActorInfo, Policy, Step

__all__ = [
    "Actor", "ActorInfo", "Adder", "ArraySpec", "Counter", "EnvironmentSpec", "Learner", "Policy",
    "Saveable", "Step", "VariableSource", "make_environment_spec",
]
