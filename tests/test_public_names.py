"""Every name a public package exports (its ``__all__``) imports: the README's and the docs'
imports are what the code has."""

import importlib

import pytest

PACKAGES = [
    "shoal.core",
    "shoal.actors",
    "shoal.agents",
    "shoal.agents.dqn",
    "shoal.agents.ppo",
    "shoal.agents.impala",
    "shoal.agents.sac",
    "shoal.learners",
    "shoal.replay",
    "shoal.launch",
    "shoal.launch.programs",
    "shoal.launch.programs.rpc",
]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_imports(package):
    module = importlib.import_module(package)
    assert module.__all__, package
    missing = []
    for name in module.__all__:
        try:
            getattr(module, name)
        except Exception as e:  # noqa: BLE001 -- named in the failure
            missing.append(f"{name} ({type(e).__name__}: {e})")
    assert not missing, f"{package}: {missing}"
