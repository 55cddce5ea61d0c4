"""A plug-in builder whose factory raises what is not its own one-line error, or returns None,
is one line naming the agent and the factory, exit 2, before the run directory is written where
the factory can be tried first; an env constructor's assertion is one line (issue 36, item 9).
The plug-ins are tests/faults/broken_agents.py's."""

import pytest

from tests.faults.harness import shoal_main

BROKEN = "tests.faults.broken_agents"
BUDGET = ["--max-env-steps", "2000", "--quiet"]


@pytest.mark.parametrize(
    "agent, says, writes",
    [
        (f"{BROKEN}:KeyErrorInValidate", "validate() raised KeyError: 'hidden'", False),
        (f"{BROKEN}:NoNetworks", "make_networks() returned None", False),
        (f"{BROKEN}:ZeroDivisionInPolicy", "make_policy() raised ZeroDivisionError: division by zero", False),
        (f"{BROKEN}:IndexErrorInTables", "make_replay_tables() raised IndexError: list index out of range", False),
        (f"{BROKEN}:MemoryErrorInLearner", "make_learner() raised MemoryError", True),  # (built by the run itself)
    ],
    ids=["validate", "make_networks", "make_policy", "make_replay_tables", "make_learner"],
)
def test_a_factory_that_raises_or_returns_none_is_one_line_naming_it(tmp_path, agent, says, writes):
    run_dir = tmp_path / "run"
    rc, errors, text = shoal_main("train", "--agent", agent, "--run-dir", str(run_dir), *BUDGET)
    assert rc == 2 and len(errors) == 1, text[-3000:]
    assert errors[0].startswith(f"shoal: error: agent '{agent}': {says}"), errors
    assert "Traceback" not in text and run_dir.exists() == writes


def test_verbose_shows_the_factorys_traceback_and_a_dry_run_or_a_program_fails_alike(tmp_path):
    agent, says = f"{BROKEN}:ZeroDivisionInPolicy", "make_policy() raised ZeroDivisionError: division by zero"
    rc, errors, text = shoal_main("train", "--agent", agent, "--run-dir", str(tmp_path / "run"), *BUDGET, "--verbose")
    assert rc == 2 and len(errors) == 1 and says in errors[0], text[-3000:]
    assert "Traceback" in text and "return 1 / 0" in text and text.index("Traceback") < text.index(errors[0])
    for extra in (["--dry-run"], ["--launcher", "processes", "--num-actors", "1"]):
        rc, errors, text = shoal_main("train", "--agent", agent, "--run-dir", str(tmp_path / "run"), *BUDGET, *extra)
        assert rc == 2 and len(errors) == 1 and says in errors[0] and "Traceback" not in text, (extra, text[-3000:])
        assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "agent, error",
    [
        (
            f"{BROKEN}:ExitsInConstructor",
            f"agent '{BROKEN}:ExitsInConstructor': ExitsInConstructor(DQNConfig(...)) raised SystemExit: no GPU here",
        ),
        (
            "tests.faults.exits_at_import:Builder",
            "cannot import 'tests.faults.exits_at_import' for agent "
            "'tests.faults.exits_at_import:Builder': SystemExit: 3",
        ),
    ],
    ids=["constructor", "import"],
)
def test_a_plugin_that_exits_is_one_line_not_an_exit(tmp_path, agent, error):
    rc, errors, text = shoal_main("train", "--agent", agent, "--run-dir", str(tmp_path / "run"), *BUDGET)
    assert rc == 2 and len(errors) == 1 and errors[0].startswith(f"shoal: error: {error}"), text[-3000:]
    assert not (tmp_path / "run").exists()


def test_an_env_constructors_assertion_is_one_line(tmp_path):
    pytest.importorskip("Box2D")
    rc, errors, text = shoal_main(
        "train",
        "--agent",
        "dqn",
        "--env",
        "LunarLander-v3",
        "--env-arg",
        "gravity=5",
        "--run-dir",
        str(tmp_path / "run"),
        *BUDGET,
    )
    assert rc == 2 and errors == [
        "shoal: error: LunarLander-v3 with arguments {'gravity': 5}: AssertionError: "
        "gravity (current value: 5) must be between -12 and 0"
    ], text[-3000:]
    assert not (tmp_path / "run").exists()
