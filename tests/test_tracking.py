"""Tracking (``--track wandb|mlflow``): the launching process sends the run's logs, videos and
result, read back from W&B's offline run files and from a local MLflow store; a resume continues
the same tracking run without sending a row twice; a failing backend is one warning line; a
missing extra is a one-line error before anything is written. The TensorBoard video too."""

import glob
import json
import os
import struct
import sys

import pytest

from shoal.core.loggers import CSVLogger
from shoal.launch import resume_experiment, run_distributed_experiment, run_experiment
from shoal.launch.experiments.config import experiment_config
from shoal.launch.experiments.tracking import CsvTail
from tests.shoal_cli import run_shoal
from tests.waiting import csv_rows, wait_for

pytestmark = pytest.mark.e2e


def config(run_dir, max_env_steps=2_000, **fields):
    return experiment_config(
        "dqn",
        "CartPole-v1",
        eval_every=1_000,
        eval_episodes=2,
        num_envs=8,
        max_env_steps=max_env_steps,
        run_dir=run_dir and str(run_dir),
        progress=False,
        **fields,
    )


def wandb_records(run_dir) -> list[tuple[str, str, dict]]:
    """``(run id, kind, fields)`` of every config, history and summary record of the offline
    runs under ``run_dir/wandb``, oldest run first (W&B's own record reader). Each run's file is
    read once W&B has written all of it: its last record is the run's ``exit``
    (``run.finish()`` may return while W&B's service still holds the file's last blocks, and a
    read may meet a record cut short: both are read again)."""
    return [
        record
        for path in sorted(glob.glob(os.path.join(run_dir, "wandb", "offline-run-*", "run-*.wandb")))
        for record in wait_for(lambda path=path: _finished_run_records(path), 60, f"W&B's exit record in {path}")
    ]


def _finished_run_records(path) -> list[tuple[str, str, dict]] | None:
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal import datastore

    records, kind = [], None
    store = datastore.DataStore()
    try:
        store.open_for_scan(path)
        while (data := store.scan_data()) is not None:
            record = wandb_internal_pb2.Record()
            record.ParseFromString(data)
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run_id = record.run.run_id
                records.append((run_id, "config", {i.key: json.loads(i.value_json) for i in record.run.config.update}))
            elif kind in ("history", "summary"):
                items = record.history.item if kind == "history" else record.summary.update
                records.append(
                    (run_id, kind, {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items})
                )
    except AssertionError:  # (a record W&B's service is still writing: its header or its data cut short)
        return None
    finally:
        store.close()
    return records if kind == "exit" else None


@pytest.fixture
def wandb_offline(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "offline")
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))


def test_a_csv_tail_reads_each_row_once_as_numbers_across_a_wider_header(tmp_path):
    log = CSVLogger(str(tmp_path), "train")
    tail = CsvTail(log.path)
    assert tail.read() == []
    log.write({"env_steps": 8, "loss": 0.5})
    log.write({"env_steps": 16, "loss": float("nan")})
    assert tail.read() == [{"env_steps": 8, "loss": 0.5}, {"env_steps": 16}]
    log.write({"env_steps": 24, "loss": 0.25, "eval_return": 9.0})  # (the file is rewritten, wider)
    with open(log.path, "a") as f:
        f.write("32,0.1")  # a row still being written is not read yet
    assert tail.read() == [{"env_steps": 24, "loss": 0.25, "eval_return": 9.0}]
    with open(log.path, "a") as f:
        f.write(",1.5\n")
    assert tail.read() == [{"env_steps": 32, "loss": 0.1, "eval_return": 1.5}] and tail.rows == 4
    assert CsvTail(log.path, rows=3).read() == [{"env_steps": 32, "loss": 0.1, "eval_return": 1.5}]


def test_a_csv_tail_sees_a_rewrite_that_kept_the_inode_number(tmp_path):
    """A rewrite's new file may get the inode number of one the tail read before (numbers are
    reused): its header tells it apart."""
    path = tmp_path / "train.csv"
    path.write_text("env_steps,loss\n8,0.5\n16,0.25\n")
    tail = CsvTail(str(path))
    assert [r["env_steps"] for r in tail.read()] == [8, 16]
    with open(path, "r+") as f:  # (the same inode, a longer file: only the header differs)
        f.write("env_steps,loss,time_act\n8,0.5,\n16,0.25,\n24,0.1,0.75\n")
    assert tail.read() == [{"env_steps": 24, "loss": 0.1, "time_act": 0.75}] and tail.rows == 3


def test_wandb_holds_the_runs_config_logs_video_and_result_and_a_resume_continues_that_run(tmp_path, wandb_offline):
    run_dir = tmp_path / "run"
    first = run_experiment(config(run_dir, track="wandb", video_every=2))
    records = wandb_records(run_dir)
    run_id = json.loads((run_dir / "tracking.json").read_text())["run_id"]
    assert {r[0] for r in records} == {run_id}
    settings = [fields for _, kind, fields in records if kind == "config" and "agent" in fields][0]
    assert settings["agent"] == "dqn" and settings["env_id"] == "CartPole-v1" and settings["video_every"] == 2
    history = [fields for _, kind, fields in records if kind == "history"]
    evals = [row for row in history if "eval/eval_return" in row]
    assert [(r["eval/env_steps"], r["eval/eval_return"]) for r in evals] == [
        (int(r["env_steps"]), float(r["eval_return"])) for r in csv_rows(run_dir / "eval.csv")
    ]
    # (every train row has env_steps; one with no episode ended since the row before has no episode_return)
    assert sum("train/env_steps" in row for row in history) == len(csv_rows(run_dir / "train.csv")) > 0
    assert sum("learner/loss" in row for row in history) == len(csv_rows(run_dir / "learner.csv")) > 0
    videos = [row for row in history if "eval/video/_type" in row]  # (evaluations 1 and 2: the first)
    assert [(v["eval/video/_type"], v["eval/env_steps"], v["eval/video/size"]) for v in videos] == [
        ("video-file", 1_000, os.path.getsize(run_dir / "videos" / "eval-000001000.mp4"))
    ]
    summary = {k: v for _, kind, fields in records if kind == "summary" for k, v in fields.items()}
    assert summary["result/final_eval_return"] == first["final_eval_return"]

    second = resume_experiment(str(run_dir), max_env_steps=4_000)
    records = wandb_records(run_dir)
    assert {r[0] for r in records} == {run_id}  # the same W&B run, in a second offline run directory
    evals = [fields for _, kind, fields in records if kind == "history" and "eval/eval_return" in fields]
    assert [r["eval/env_steps"] for r in evals] == [int(r["env_steps"]) for r in csv_rows(run_dir / "eval.csv")]
    assert len(evals) == second["num_evals"] > first["num_evals"]  # (no row sent twice)
    summary = {k: v for _, kind, fields in records if kind == "summary" for k, v in fields.items()}
    assert summary["result/env_steps"] == second["env_steps"]


def test_mlflow_from_the_cli_tracks_to_a_local_store_in_the_working_directory(tmp_path):
    from mlflow import MlflowClient

    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    done = run_shoal(
        "train",
        "--max-env-steps",
        "2000",
        "--eval-every",
        "1000",
        "--eval-episodes",
        "2",
        "--num-envs",
        "8",
        "--run-dir",
        "run",
        "--video-every",
        "1",
        "--track",
        "mlflow",
        "--quiet",
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    run_id = json.loads((tmp_path / "run" / "tracking.json").read_text())["run_id"]
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "run" and run.data.params["agent"] == "dqn"
    history = client.get_metric_history(run_id, "eval/eval_return")
    assert [(m.step, m.value) for m in history] == [
        (int(r["env_steps"]), float(r["eval_return"])) for r in csv_rows(tmp_path / "run" / "eval.csv")
    ]
    assert run.data.metrics["result/final_eval_return"] == result["final_eval_return"]
    videos = [os.path.basename(a.path) for a in client.list_artifacts(run_id, "videos")]
    assert videos == sorted(os.listdir(tmp_path / "run" / "videos")) and len(videos) == 2
    assert {a.path for a in client.list_artifacts(run_id)} >= {"config.json", "result.json", "videos"}


def test_a_failing_tracker_is_one_warning_and_the_run_and_its_logs_go_on(tmp_path, monkeypatch, capfd):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv(
        "MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/a-file/mlflow.db"
    )  # (no such directory can be made)
    result = run_experiment(config(tmp_path / "run", track="mlflow"))
    warnings = [line for line in capfd.readouterr().err.splitlines() if "tracking" in line]
    assert len(warnings) == 1 and warnings[0].startswith("shoal: warning: tracking (mlflow) failed"), warnings
    assert len(csv_rows(tmp_path / "run" / "eval.csv")) == result["num_evals"] == 2


def test_a_missing_tracking_extra_or_bad_setting_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # (an import of it fails, as without the extra)
    with pytest.raises(ValueError, match=r"--track wandb needs the 'wandb' extra.*pip install -e '\.\[wandb\]'"):
        run_experiment(config(tmp_path / "run", track="wandb"))
    with pytest.raises(ValueError, match="track must be one of wandb, mlflow"):
        run_experiment(config(tmp_path / "run", track="neptune"))
    with pytest.raises(ValueError, match="needs a run directory"):
        run_experiment(config(None, track="mlflow"))
    assert not (tmp_path / "run").exists()


def test_a_distributed_run_is_tracked_by_its_driver_alone(tmp_path, wandb_offline):
    run_dir = tmp_path / "run"
    result = run_distributed_experiment(config(run_dir, 3_000, track="wandb"), num_actors=1, launcher="processes")
    assert len(glob.glob(str(run_dir / "wandb" / "offline-run-*"))) == 1  # (no node opened a run of its own)
    history = [fields for _, kind, fields in wandb_records(run_dir) if kind == "history"]
    assert sum("actor_0/steps_per_s" in row for row in history) == len(csv_rows(run_dir / "actor_0.csv")) > 0
    assert {row["program/actors"] for row in history if "program/actors" in row} == {1}
    assert sum("eval/eval_return" in row for row in history) == result["num_evals"]


def tensorboard_images(directory) -> list[tuple[int, str, bytes]]:
    """``(step, tag, encoded image)`` of every image summary in ``directory``'s event files
    (TFRecords: length, CRC, an ``Event``, CRC)."""
    from tensorboardX.proto.event_pb2 import Event

    images = []
    for path in sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*"))):
        with open(path, "rb") as f:
            data = f.read()
        while data:
            (length,) = struct.unpack("<Q", data[:8])
            event = Event.FromString(data[12 : 12 + length])
            data = data[16 + length :]
            images += [
                (event.step, v.tag, v.image.encoded_image_string) for v in event.summary.value if v.HasField("image")
            ]
    return images


def test_evaluation_videos_reach_tensorboard_as_animated_images(tmp_path):
    from PIL import Image

    result = run_experiment(config(tmp_path / "run", video_every=1))
    images = tensorboard_images(tmp_path / "run" / "tb" / "eval")
    assert [(step, tag) for step, tag, _ in images] == [
        (int(r["env_steps"]), "eval/video") for r in csv_rows(tmp_path / "run" / "eval.csv")
    ]
    import io

    gif = Image.open(io.BytesIO(images[0][2]))
    assert gif.format == "GIF" and gif.size == (240, 160) and gif.n_frames > 1 and result["num_evals"] == 2
