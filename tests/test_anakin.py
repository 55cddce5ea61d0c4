"""The compiled loop (``--launcher anakin``) on gymnax's envs: it solves CartPole in one process,
a seeded run is the same twice, it calls the one PPO loss the replay path calls, and what it
refuses is one line, exit 2, nothing written.

gymnax is installed without its dependencies (``pip install --no-deps gymnax==1.0.1``: its wheel
asks for gymnasium < 1.4), so no extra of ``dev`` can bring it: CI, which installs ``.[dev]``,
skips this file (docs/anakin.md)."""

import csv
import json
import os
import sys

import pytest

pytest.importorskip("gymnax", reason="gymnax is installed --no-deps, outside .[dev] (docs/anakin.md)")

from shoal.agents.ppo import learning  # noqa: E402 -- (after the skip)
from shoal.agents.ppo.builder import PPOBuilder  # noqa: E402
from shoal.agents.ppo.config import PPOConfig  # noqa: E402
from shoal.launch import EnvConfig, EvaluationConfig, ExperimentConfig, RunConfig, TrackingConfig  # noqa: E402
from shoal.launch.experiments.anakin import run_anakin  # noqa: E402
from shoal.launch.experiments.cli.main import main  # noqa: E402
from shoal.launch.experiments.config import experiment_config  # noqa: E402
from shoal.launch.experiments.runner import run_experiment  # noqa: E402
from tests.shoal_cli import run_shoal  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def compilation_cache():
    """The suite's own JAX cache (conftest), as ``shoal train`` enables it: a seeded run's
    second process, and the second run here, load what the first compiled."""
    from shoal.launch.experiments.compilation_cache import enable_compilation_cache

    enable_compilation_cache()


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_anakin_ppo_solves_gymnax_cartpole(tmp_path):  # (in the fast layer: issue 57 asks it there, ~4 s)
    config = experiment_config(
        "ppo",
        "gymnax:CartPole-v1",
        seed=0,
        max_env_steps=200_000,
        eval_every=4096,
        run_dir=str(tmp_path / "run"),
        progress=False,
    )
    result = run_anakin(config)
    assert result["solved"] and result["final_eval_return"] >= 475, result
    assert result["launcher"] == "anakin" and result["env_steps"] <= 100_000, result
    assert set(result["time_breakdown"]["process"]) >= {"compile", "train", "evaluation"}
    run = tmp_path / "run"
    for name in ("config.json", "result.json", "train.csv", "eval.csv", "learner.csv"):
        assert (run / name).is_file(), name
    evals = rows(run / "eval.csv")
    assert len(evals) == result["num_evals"] and float(evals[-1]["eval_return"]) >= 475
    train = rows(run / "train.csv")
    assert int(train[-1]["env_steps"]) == result["env_steps"] and float(train[-1]["steps_per_s"]) > 0
    assert "loss" in rows(run / "learner.csv")[-1]


def short(seed=0, **flat):
    """A few dispatches of PPO on gymnax's CartPole that stop by budget, not by solving."""
    return experiment_config(
        "ppo",
        "gymnax:CartPole-v1",
        seed=seed,
        **{"max_env_steps": 4096, "eval_every": 1024, "target_return": 1e9, "progress": False, **flat},
    )


@pytest.mark.e2e  # (three short training runs)
def test_a_seeded_run_is_the_same_twice(tmp_path):
    runs = [run_anakin(short(run_dir=str(tmp_path / f"run{i}"))) for i in range(2)]
    same = ("env_steps", "learner_steps", "num_evals", "final_eval_return", "solved")
    assert [{k: r[k] for k in same} for r in runs][0] == {k: runs[1][k] for k in same}
    for name, columns in (("eval.csv", ["eval_return"]), ("learner.csv", ["loss", "entropy", "approx_kl"])):
        first, second = (rows(tmp_path / f"run{i}" / name) for i in range(2))
        assert [[r[c] for c in columns] for r in first] == [[r[c] for c in columns] for r in second], name
    run_anakin(short(seed=1, run_dir=str(tmp_path / "seed1")))
    losses = [[r["loss"] for r in rows(tmp_path / run / "learner.csv")] for run in ("run0", "seed1")]
    assert losses[0] != losses[1]  # (another seed, another run)


@pytest.mark.e2e  # (a run of each path)
def test_both_paths_call_the_one_ppo_loss():
    """Anakin's update and the replay-backed learner's are ``learning.make_update(networks,
    config, builder.loss)``: a builder whose loss counts its traces is traced by both."""
    assert PPOBuilder.loss is learning.ppo_loss
    traced = []

    def counting_loss(*args):
        traced.append(args[2]["observation"].shape)
        return learning.ppo_loss(*args)

    class CountingPPO(PPOBuilder):
        loss = staticmethod(counting_loss)

    def config(env_id):
        return ExperimentConfig(
            builder=CountingPPO(PPOConfig()),
            env=EnvConfig(env_id),
            run=RunConfig(max_env_steps=1024),
            evaluation=EvaluationConfig(every=1024, episodes=2, target_return=1e9),
            tracking=TrackingConfig(progress=False),
        )

    run_anakin(config("gymnax:CartPole-v1"))
    assert traced, "the compiled loop did not call the builder's loss"
    anakin_traces = len(traced)
    run_experiment(config("CartPole-v1"))
    assert len(traced) > anakin_traces, "the replay-backed learner did not call the builder's loss"


@pytest.mark.parametrize(
    "args, expected",
    [
        (
            ["--env", "gymnax:CartPol-v1"],
            "unknown gymnax environment id 'CartPol-v1'; did you mean gymnax:CartPole-v1?",
        ),
        (["--env", "gymnax:FrozenLake-misc"], "observation space Discrete(16) is Discrete"),
        (["--env", "gymnax:CartPole-v1", "--launcher", "anakin", "--num-actors", "2"], "--num-actors apply to"),
        (["--env", "gymnax:CartPole-v1", "--num-actors", "2"], "--launcher anakin runs the envs and the update"),
        (["--env", "CartPole-v1", "--launcher", "anakin"], "CartPole-v1 is not a JAX env"),
        (["--env", "gymnax:CartPole-v1", "--env-arg", "nope=1"], "gymnax:CartPole-v1 has no parameter nope"),
        (
            ["--env", "gymnax:CartPole-v1", "--agent", "impala"],
            "trains PPO, DQN and SAC for now (--agent ppo|dqn|sac), not impala",
        ),
        (["--env", "gymnax:CartPole-v1", "--set", "rollouts_per_update=2"], "rollouts_per_update must be 1"),
    ],
)
def test_what_anakin_refuses_is_one_line(args, expected, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "run"
    agent = [] if "--agent" in args else ["--agent", "ppo"]
    assert main(["train", *agent, *args, "--run-dir", str(run_dir)]) == 2
    captured = capsys.readouterr()
    errors = captured.err.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("shoal: error:") and expected in errors[0], errors
    assert captured.out == "" and not run_dir.exists() and not (tmp_path / "runs").exists()


@pytest.mark.e2e  # (`shoal train` in a subprocess: two host devices are set before JAX starts)
def test_a_batch_that_does_not_divide_over_the_devices_is_one_line(tmp_path):
    run_dir = tmp_path / "run"
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    args = ["--agent", "ppo", "--env", "gymnax:CartPole-v1", "--num-envs", "15", "--run-dir", str(run_dir)]
    proc = run_shoal("train", *args, timeout=120, env=env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("shoal: error:")]
    assert errors == [
        "shoal: error: --num-envs 15 does not divide over the 2 local devices: the compiled loop steps "
        "num_envs / devices envs on each (use a multiple of 2)"
    ], proc.stderr[-2000:]
    assert not run_dir.exists()


def test_without_gymnax_a_jax_env_is_one_line_naming_the_install(tmp_path, capsys, monkeypatch):
    for module in [m for m in sys.modules if m == "gymnax" or m.startswith("gymnax.")]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setitem(sys.modules, "gymnax", None)  # (`import gymnax` raises ImportError)
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--agent", "ppo", "--env", "gymnax:CartPole-v1", "--run-dir", str(tmp_path / "run")]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert errors == [
        "shoal: error: gymnax envs need the 'gymnax' extra, which is not installed; run "
        "pip install -e '.[gymnax]' && pip install --no-deps \"gymnax==1.0.1\""
    ]
    assert not (tmp_path / "run").exists()


@pytest.mark.e2e  # (a training run)
def test_your_own_jax_env_registered_with_gymnax_trains_by_id():
    """docs/anakin.md's route for an env of your own: gymnax's functional API (here gymnax's older
    five values, and no reset of its own: the adapter resets it), registered with gymnax."""
    import gymnax

    from tests.test_jax_envs import CountTo

    if "ShoalCountTo-v0" not in gymnax.registered_envs:
        gymnax.register("ShoalCountTo-v0", CountTo)
    config = experiment_config(
        "ppo", "gymnax:ShoalCountTo-v0", max_env_steps=2048, eval_every=512, target_return=3.0, progress=False
    )
    result = run_anakin(config)
    assert result["solved"] and result["final_eval_return"] == 3.0 and result["num_evals"] == 1, result


@pytest.mark.e2e  # (a training run)
def test_continuous_actions_train_in_the_compiled_loop(tmp_path):
    """PPO's Gaussian policy on gymnax's Pendulum (Box actions, clipped to the space by the
    adapter): a few dispatches run and evaluate (Pendulum has no registered threshold)."""
    config = experiment_config(
        "ppo", "gymnax:Pendulum-v1", max_env_steps=2048, eval_every=1024, run_dir=str(tmp_path / "run"), progress=False
    )
    result = run_anakin(config)
    assert not result["solved"] and result["num_evals"] == 2 and -2000 < result["final_eval_return"] < 0, result
    assert len(rows(tmp_path / "run" / "learner.csv")) == 2


@pytest.mark.e2e  # (three training runs, through `shoal train`'s code)
def test_a_resumed_run_continues_exactly(tmp_path, capsys, monkeypatch):
    """Stopped at 2,048 env steps (its last checkpoint) and resumed with ``shoal train --resume``
    to 4,096, a run logs what the run that never stopped logs, row by row."""
    monkeypatch.chdir(tmp_path)
    run_anakin(short(run_dir=str(tmp_path / "whole")))
    flags = ["--eval-every", "1024", "--target-return", "1e9", "--quiet"]
    first = ["train", "--agent", "ppo", "--env", "gymnax:CartPole-v1", "--max-env-steps", "2048", *flags]
    assert main([*first, "--run-dir", str(tmp_path / "parts")]) == 0
    assert main(["train", "--resume", str(tmp_path / "parts"), "--max-env-steps", "4096", "--quiet"]) == 0
    resumed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert resumed["resumed_from"] == 2048 and resumed["env_steps"] == 4096, resumed
    for name, columns in (("eval.csv", ["env_steps", "eval_return"]), ("learner.csv", ["learner_steps", "loss"])):
        whole, parts = (rows(tmp_path / run / name) for run in ("whole", "parts"))
        assert [[r[c] for c in columns] for r in parts] == [[r[c] for c in columns] for r in whole], name
    assert main(["status", str(tmp_path / "parts")]) == 0
    status = capsys.readouterr().out.splitlines()
    assert status[0] == "run: ppo on gymnax:CartPole-v1, seed 0 (anakin: envs, policy and update in one compiled loop)"


class StopAtLook:
    """A stop event that is set from its ``n``-th look on (the runner looks before each
    evaluation interval and after each part of one)."""

    def __init__(self, n: int) -> None:
        self.n, self.looks = n, 0

    def is_set(self) -> bool:
        self.looks += 1
        return self.looks >= self.n


@pytest.mark.e2e  # (three short training runs)
def test_a_stop_between_two_evaluations_ends_the_part_under_way_and_the_run_resumes_on_the_grid(
    tmp_path, capsys, monkeypatch
):
    """A dispatch runs in parts (``runner.PART_S``, here one iteration each): a stop is honoured at
    the end of the part under way, mid-interval, with no evaluation off the grid; resumed, the run
    evaluates and logs where the run that never stopped does."""
    from shoal.launch.experiments.anakin import runner

    monkeypatch.chdir(tmp_path)
    run_anakin(short(run_dir=str(tmp_path / "whole"), eval_every=2048))  # (4 iterations of 512 an interval)
    monkeypatch.setattr(runner, "PART_S", 1e-9)  # (parts of one iteration: timing plays no part)
    stopped = run_anakin(short(run_dir=str(tmp_path / "parts"), eval_every=2048), StopAtLook(3))
    assert stopped["terminated"] and stopped["env_steps"] == 1024 and stopped["num_evals"] == 0, stopped
    assert not os.path.exists(tmp_path / "parts" / "eval.csv") or rows(tmp_path / "parts" / "eval.csv") == []
    assert main(["train", "--resume", str(tmp_path / "parts"), "--quiet"]) == 0
    resumed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert resumed["resumed_from"] == 1024 and resumed["env_steps"] == 4096, resumed
    whole, parts = (rows(tmp_path / run / "eval.csv") for run in ("whole", "parts"))
    assert [(r["env_steps"], r["eval_return"]) for r in parts] == [(r["env_steps"], r["eval_return"]) for r in whole]
    columns = ["env_steps", "episodes", "episode_return", "learner_steps"]  # (an interval's sums, in parts or not)
    whole, parts = (rows(tmp_path / run / "train.csv") for run in ("whole", "parts"))
    assert [[r[c] for c in columns] for r in parts if r["env_steps"] != "1024"] == [
        [r[c] for c in columns] for r in whole
    ]


@pytest.mark.e2e  # (a short training run)
def test_a_stop_at_the_end_of_the_last_short_interval_still_evaluates(tmp_path, monkeypatch):
    """A budget that ends off the grid (3,072 of intervals of 2,048): a stop that comes with the
    last part of that short interval still evaluates there, as the run that never stopped does."""
    from shoal.launch.experiments.anakin import runner

    monkeypatch.setattr(runner, "PART_S", 1e-9)  # (parts of one iteration: looks 2-5, then 7-8)
    result = run_anakin(short(run_dir=str(tmp_path / "run"), eval_every=2048, max_env_steps=3072), StopAtLook(8))
    assert result["terminated"] and result["env_steps"] == 3072 and result["num_evals"] == 2, result
    assert [r["env_steps"] for r in rows(tmp_path / "run" / "eval.csv")] == ["2048", "3072"]


@pytest.mark.e2e  # (a replay-backed run to the solve)
def test_a_jax_env_also_runs_through_actors_and_replay():
    """Both ways for one env: the replay-backed runner steps ``gymnax:CartPole-v1`` as a
    gymnasium vector env (``JaxGymVectorEnv``) and solves it too."""
    config = experiment_config("ppo", "gymnax:CartPole-v1", max_env_steps=100_000, progress=False)
    result = run_experiment(config)
    assert result["solved"] and "launcher" not in result and result["time_breakdown"]["process"]["env_step"] > 0
