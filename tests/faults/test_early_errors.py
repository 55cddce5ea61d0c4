"""Clear errors before anything is written (issue 21, items 7, 9 and 10): networks that cannot
fit in memory, bad ``SHOAL_*`` environment variables, and a dry run that refuses exactly what a
run refuses (a port range too small for the program's servers, a resources group it lacks).

Most checks run ``main`` in this process (the CLI's own checks decide); the budget in the
memory and environment cases is below what DQN needs to learn, so that code without the check
refuses quickly with another line instead of training (or allocating)."""

import os

import pytest

from shoal.agents import get_builder
from shoal.agents import learner_memory as memory
from shoal.core import environment_variables as variables
from shoal.launch import ExperimentConfig, Program, ServiceNode, run_distributed_experiment
from shoal.launch.programs.launching import check_ports, servers
from shoal.launch.programs.rpc.server import max_message_bytes
from tests.faults.harness import shoal_main as shoal
from tests.shoal_cli import run_shoal

GIB = 2**30
TOO_SMALL_BUDGET = ["--max-env-steps", "200"]  # (below DQN's first update: refused later, either way)
ENVS = {"dqn": "CartPole-v1", "ppo": "CartPole-v1", "impala": "CartPole-v1", "sac": "Pendulum-v1"}


@pytest.fixture
def memory_of_16_gib(monkeypatch):
    """The learner's device has 16 GiB, whatever this machine has."""
    monkeypatch.setattr(memory, "device_memory", lambda: (16 * GIB, "the test's memory"))


# 7. networks that cannot fit


@pytest.mark.parametrize("agent", sorted(ENVS))
def test_networks_that_cannot_fit_are_refused_by_validate(agent, memory_of_16_gib):
    config = ExperimentConfig.from_flat(
        builder=get_builder(agent, hidden_sizes=(65536, 65536, 65536)), env_id=ENVS[agent], num_envs=4, run_dir=None
    )
    with pytest.raises(
        ValueError,
        match=rf"^{agent}'s networks cannot fit: its learner needs at least "
        r"[0-9,.]+ GiB .* more than the test's memory \(16.0 GiB\)",
    ):
        config.validate(config.environment_spec())


def test_the_estimate_counts_parameters_target_and_optimiser_from_shapes():
    config = ExperimentConfig.from_flat(builder=get_builder("dqn"), env_id="CartPole-v1", num_envs=4, run_dir=None)
    spec = config.environment_spec()
    count, param_bytes, per_device = memory.learner_bytes(config.builder, config.make_networks(spec))
    assert count == 4 * 64 + 64 + 64 * 64 + 64 + 64 * 2 + 2 and param_bytes == 4 * count  # (4-64-64-2, float32)
    # params + target params + Adam's two moments, then gradients, new params and the host copy
    assert 7 * param_bytes <= per_device < 7 * param_bytes + 1024
    config.validate(spec)  # (the defaults fit)


@pytest.mark.parametrize("launcher", [None, "processes"])
def test_networks_that_cannot_fit_write_nothing(launcher, memory_of_16_gib, tmp_path):
    run_dir = tmp_path / "run"
    args = [
        "train",
        "--agent",
        "dqn",
        "--set",
        "hidden_sizes=65536,65536,65536",
        "--run-dir",
        str(run_dir),
        *TOO_SMALL_BUDGET,
    ] + (["--launcher", launcher, "--num-actors", "1"] if launcher else [])
    for extra in ([], ["--dry-run"]):
        rc, errors, text = shoal(*args, *extra)
        assert rc == 2 and len(errors) == 1 and "dqn's networks cannot fit" in errors[0], text[-2000:]
        assert "the test's memory (16.0 GiB)" in errors[0] and not run_dir.exists()


def test_a_learner_on_a_ray_cluster_is_not_measured_against_this_machine(monkeypatch):
    from shoal.launch.experiments.distributed.preflight import prepare_distributed

    monkeypatch.setattr(memory, "device_memory", lambda: (4 * GIB, "the test's memory"))
    monkeypatch.setenv("SHOAL_RPC_MAX_MESSAGE_MB", "2047")  # (1 GiB of parameters fit one message)
    config = ExperimentConfig.from_flat(
        builder=get_builder("dqn", hidden_sizes=(16384, 16384)), env_id="CartPole-v1", run_dir=None
    )
    prepared = prepare_distributed(config, 2, "ray", ray_address="10.0.0.1:6379")  # (joins nothing)
    assert sorted(prepared.program.groups) == ["actor", "counter", "evaluator", "learner", "replay"]
    with pytest.raises(ValueError, match="dqn's networks cannot fit: its learner needs at least 7.0 GiB"):
        prepare_distributed(config, 2, "ray")  # (a local Ray: the learner runs on this machine)


# 9. SHOAL_* environment variables


@pytest.mark.parametrize(
    "name, text, accepted",
    [
        ("SHOAL_RPC_MAX_MESSAGE_MB", "abc", "a number of MiB in [1, 2047]"),
        ("SHOAL_RPC_MAX_MESSAGE_MB", "1e30", "a number of MiB in [1, 2047]"),
        ("SHOAL_RPC_MAX_MESSAGE_MB", "0", "a number of MiB in [1, 2047]"),
        ("SHOAL_RPC_MAX_MESSAGE_MB", "nan", "a number of MiB in [1, 2047]"),
        ("SHOAL_PEER_TIMEOUT_S", "-1", "a number of seconds in [1, 86400]"),
        ("SHOAL_PARAMS_VIA", "shm", "auto or rpc"),
        ("SHOAL_PORTS", "80-90", "FIRST-LAST with 1024 <= FIRST <= LAST <= 65535"),
        ("SHOAL_TOKEN", "has space", "printable ASCII without spaces"),
    ],
)
def test_a_bad_environment_variable_is_named_before_anything_is_written(name, text, accepted, monkeypatch, tmp_path):
    monkeypatch.setenv(name, text)
    run_dir = tmp_path / "run"
    for launch in ([], ["--launcher", "processes", "--num-actors", "1"]):
        rc, errors, out = shoal("train", "--run-dir", str(run_dir), *TOO_SMALL_BUDGET, *launch)
        assert rc == 2 and len(errors) == 1, out[-2000:]
        assert errors[0].startswith(
            f"shoal: error: environment variable {name}={text!r} is not valid: expected {accepted}"
        ), errors
        assert not run_dir.exists()


def test_a_cache_path_that_is_a_file_is_refused(monkeypatch, tmp_path):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("SHOAL_COMPILATION_CACHE", str(tmp_path / "file"))
    rc, errors, out = shoal("train", "--run-dir", str(tmp_path / "run"), *TOO_SMALL_BUDGET)
    assert rc == 2 and len(errors) == 1 and "SHOAL_COMPILATION_CACHE=" in errors[0] and "or off" in errors[0], out
    assert not (tmp_path / "run").exists()


def test_variables_are_parsed_in_one_place(monkeypatch):
    monkeypatch.delenv("SHOAL_RPC_MAX_MESSAGE_MB", raising=False)
    assert max_message_bytes() == 256 * 2**20 and variables.value("SHOAL_PEER_TIMEOUT_S") == 60
    monkeypatch.setenv("SHOAL_RPC_MAX_MESSAGE_MB", "2047")
    assert max_message_bytes() == 2047 * 2**20 < 2**31  # (gRPC's limit is a signed 32-bit count)
    monkeypatch.setenv("SHOAL_RPC_MAX_MESSAGE_MB", "1e30")
    with pytest.raises(ValueError, match=r"SHOAL_RPC_MAX_MESSAGE_MB='1e30' is not valid: expected a number"):
        max_message_bytes()
    with pytest.raises(ValueError, match="SHOAL_RPC_MAX_MESSAGE_MB"):  # from Python too, before any process
        run_distributed_experiment(
            ExperimentConfig.from_flat(
                builder=get_builder("dqn"), env_id="CartPole-v1", run_dir=None, max_env_steps=200
            ),
            num_actors=1,
        )


@pytest.mark.e2e
def test_the_cli_exits_2_in_one_line(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_shoal(
        "train",
        "--launcher",
        "processes",
        "--num-actors",
        "1",
        "--run-dir",
        str(run_dir),
        *TOO_SMALL_BUDGET,
        timeout=120,
        env=dict(os.environ, SHOAL_RPC_MAX_MESSAGE_MB="abc"),
    )
    errors = [line for line in proc.stderr.splitlines() if line.startswith("shoal: error:")]
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr[-2000:]
    assert "SHOAL_RPC_MAX_MESSAGE_MB='abc'" in errors[0] and "Traceback" not in proc.stderr
    assert proc.stdout == "" and not run_dir.exists()


def test_parameters_read_over_rpc_must_fit_one_message(monkeypatch, tmp_path):
    monkeypatch.setenv("SHOAL_RPC_MAX_MESSAGE_MB", "1")
    args = [
        "train",
        "--launcher",
        "processes",
        "--num-actors",
        "1",
        "--set",
        "hidden_sizes=1024,1024",
        "--run-dir",
        str(tmp_path / "run"),
        "--dry-run",
    ]
    rc, errors, text = shoal(*args)
    assert rc == 0, text[-2000:]  # (shared memory: no message carries them)
    rc, errors, text = shoal(*args, "--params-via", "rpc")
    assert rc == 2 and len(errors) == 1, text[-2000:]
    assert (
        "the learner's parameters (4.0 MiB) are larger than one RPC message may be (SHOAL_RPC_MAX_MESSAGE_MB=1"
        in errors[0]
        and not (tmp_path / "run").exists()
    )


# 10. a dry run refuses what a run refuses


@pytest.mark.parametrize(
    "args, expected",
    [
        (
            ["--ports", "50000"],
            "the port range 50000-50000 holds 1 port(s), but the program's 6 servers on this "
            "machine (replay, counter, learner, actor_0, actor_1, evaluator) need one each",
        ),
        (["--ports", "50000-50004"], "e.g. --ports 50000-50005"),
        (["--resources", "nosuchgroup:num_cpus=1"], "program 'dqn' has no group 'nosuchgroup'"),
    ],
)
def test_a_dry_run_refuses_what_a_run_refuses(args, expected, tmp_path):
    run_dir = tmp_path / "run"
    lines = []
    for dry in (["--dry-run"], []):
        rc, errors, text = shoal(
            "train",
            "--launcher",
            "processes",
            "--num-actors",
            "2",
            "--run-dir",
            str(run_dir),
            *TOO_SMALL_BUDGET,
            *args,
            *dry,
        )
        assert rc == 2 and len(errors) == 1 and expected in errors[0], text[-2000:]
        assert not run_dir.exists()
        lines.append(errors[0])
    assert lines[0] == lines[1]


def test_distributed_flags_without_a_launcher_are_refused(tmp_path):
    for args in (
        ["--ports", "50000-50099"],
        ["--resources", "actor:num_cpus=1"],
        ["--params-via", "rpc"],
        ["--num-actors", "3"],
    ):  # (--num-actors alone once ran one process and exited 0)
        for dry in (["--dry-run"], []):
            rc, errors, text = shoal("train", "--run-dir", str(tmp_path / "run"), *TOO_SMALL_BUDGET, *args, *dry)
            assert rc == 2 and len(errors) == 1 and f"{args[0]} apply to a distributed program" in errors[0], text
    assert not (tmp_path / "run").exists()


def test_a_port_per_server_on_one_host():
    program = Program("p")
    learner = program.add_node(ServiceNode(dict), label="learner")
    program.add_node(ServiceNode(dict, learner), label="replay")
    program.add_group("actor", lambda i: ServiceNode(dict, learner), 3)
    assert servers(program) == ["learner", "replay", "actor_0", "actor_1", "actor_2"]
    check_ports(program, "processes", (50000, 50004))
    with pytest.raises(ValueError, match=r"the port range 50000-50003 holds 4 port\(s\), but the program's 5 servers"):
        check_ports(program, "inprocess", (50000, 50003))
    with pytest.raises(ValueError, match=r"ports must be \(FIRST, LAST\) with 1024 <= FIRST"):
        check_ports(program, "processes", (80, 90))
    # Under Ray a host needs a port for each node placed together (replay beside the learner).
    program.colocate(["replay"], with_node="learner")
    check_ports(program, "ray", (50000, 50001))
    with pytest.raises(ValueError, match=r"2 servers on one host \(learner, replay\)"):
        check_ports(program, "ray", (50000, 50000))


def test_a_dry_run_without_a_launcher_shows_the_one_process_run(tmp_path):
    import contextlib
    import io

    from shoal.launch.experiments.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["train", "--run-dir", str(tmp_path / "run"), "--dry-run"])
    assert rc == 0 and "actor" not in err.getvalue(), err.getvalue()  # (no warning about actor processes)
    text = out.getvalue()
    assert '"launch": null' in text and "one process: an actor, the learner, an embedded replay server" in text
    assert "actor_0" not in text and "edges:" not in text, text
    assert not (tmp_path / "run").exists()


def test_a_target_that_shorter_episodes_may_put_out_of_reach_is_a_warning(tmp_path):
    rc, errors, text = shoal(
        "train", "--env-arg", "max_episode_steps=200", "--run-dir", str(tmp_path / "run"), "--dry-run"
    )
    assert rc == 0 and errors == [], text
    assert (
        "shoal: warning: the target return 475 is CartPole-v1's reward_threshold for episodes of up to 500 "
        "steps; with max_episode_steps=200 it may be out of reach (set --target-return)"
    ) in text.splitlines()
    rc, errors, text = shoal(
        "train",
        "--env-arg",
        "max_episode_steps=200",
        "--target-return",
        "150",
        "--run-dir",
        str(tmp_path / "run"),
        "--dry-run",
    )
    assert rc == 0 and "out of reach" not in text
