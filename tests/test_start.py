"""A one-process run acts before it imports TensorFlow: the replay server, the adder's client
and the policy need none, and the learner's dataset imports it at its first batch (timed as
``replay_open``). The result says when the first env step came (``first_step_s``)."""

import json
import subprocess
import sys

import pytest

from shoal.replay import default_backend

pytestmark = pytest.mark.e2e  # a real run in a fresh process

RUN = """
import json, sys
from shoal.actors.loops import EnvironmentLoop
from shoal.agents import get_builder
from shoal.launch import ExperimentConfig, run_experiment

seen = []
step = EnvironmentLoop.step
def first_step(self):
    if not seen:
        seen.append("tensorflow" in sys.modules)
    return step(self)
EnvironmentLoop.step = first_step
result = run_experiment(ExperimentConfig.from_flat(builder=get_builder("dqn"), env_id="CartPole-v1", seed=0,
                                                   max_env_steps=1600, eval_every=10**6, progress=False))
print(json.dumps({"tensorflow_at_first_step": seen[0], "tensorflow_at_end": "tensorflow" in sys.modules,
                  "result": result}))
"""


def test_a_one_process_run_takes_its_first_step_before_importing_tensorflow():
    proc = subprocess.run([sys.executable, "-c", RUN], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # (on Reverb the learner samples through TensorFlow's dataset; native replay never imports it)
    reverb = default_backend() == "reverb"
    assert out["tensorflow_at_first_step"] is False and out["tensorflow_at_end"] is reverb
    result = out["result"]
    assert result["learner_steps"] > 0
    assert 0 < result["first_step_s"] < result["process_s"]
    if reverb:
        assert result["time_breakdown"]["process"].get("replay_open", 0) > 0  # (the import, waited for)
