"""The learner's update on 2 (forced CPU) devices equals 1 device on the same global batch."""

import json
import os
import subprocess
import sys

import pytest

from tests.pmap_equivalence_worker import CASES, PACKED_CASES

# (each agent's learner compiled and updated on 1 and on 2 forced devices, in a subprocess: ~40 s)
pytestmark = pytest.mark.e2e

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("case", sorted(CASES))
def test_two_devices_match_one(case, pmap_result):
    result = pmap_result[case]
    assert result["max_update"] > 1e-3  # the updates really moved the params
    assert result["max_diff"] < 1e-5, result
    assert result["replica_spread"] == 0.0  # all devices hold identical params


def test_batches_are_split_along_their_leading_axis(pmap_result):
    assert pmap_result["shard_layout_ok"]


def test_per_example_outputs_come_back_in_the_host_batchs_order(pmap_result):
    assert pmap_result["aux_in_host_order"]
    assert pmap_result["aux_in_host_order_packed"]  # (a packed batch splits by rows as its fields do)


@pytest.mark.parametrize("case", PACKED_CASES)
def test_packed_batches_train_as_their_fields_on_two_devices(case, pmap_result):
    # (the fields arrive bit for bit, tests/test_packing.py; the compiled update around them may
    # fuse differently, and JAX 0.12's recurrent PPO then differs in the last float bit)
    assert pmap_result["packed"][case]["max_diff"] < 1e-6, pmap_result["packed"][case]


@pytest.fixture(scope="module")
def pmap_result():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.pmap_equivalence_worker"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["num_devices"] == 2
    return result
