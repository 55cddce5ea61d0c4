"""Checks an installed Shoal wheel (run by ``.ci/run`` with the wheel's venv, outside the tree):
every package ``pyproject.toml`` lists imports from site-packages, every public name
(``__all__``) resolves, every registered agent's builder and config load, and ``shoal train``
trains a short run. Usage: ``python wheel_smoke.py PYPROJECT RUN_DIR``."""

import importlib
import json
import os
import subprocess
import sys
import tomllib


def main(pyproject: str, run_dir: str) -> None:
    import shoal

    installed = os.path.dirname(shoal.__file__)
    assert "site-packages" in installed, f"shoal imports from {installed}, not from the installed wheel"
    with open(pyproject, "rb") as f:
        packages = tomllib.load(f)["tool"]["setuptools"]["packages"]
    for package in packages:
        module = importlib.import_module(package)
        assert os.path.dirname(module.__file__).startswith(installed), (package, module.__file__)
        missing = [name for name in getattr(module, "__all__", ()) if not hasattr(module, name)]
        assert not missing, f"{package} exports names that do not import: {missing}"
    from shoal.agents import config_class, get_builder, registered_agents

    agents = registered_agents()
    assert {"dqn", "ppo", "impala", "sac", "r2d2"} <= set(agents), agents
    for name in agents:
        builder = get_builder(name)
        config_class(name)()  # (every field has a default)
        assert builder is not None, name
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "shoal",
            "train",
            "--agent",
            "dqn",
            "--env",
            "CartPole-v1",
            "--seed",
            "0",
            "--max-env-steps",
            "3000",
            "--run-dir",
            run_dir,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["env_steps"] >= 3000 or result["solved"], result
    assert result["learner_steps"] > 0, result
    print(
        f"wheel: {len(packages)} packages and {len(agents)} agents import from {installed}; "
        f"dqn trained {result['env_steps']} env steps ({result['learner_steps']} learner steps)"
    )


if __name__ == "__main__":
    main(*sys.argv[1:])
