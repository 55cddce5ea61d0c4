"""A parameter server with asynchronous workers (the Launchpad paper's first example).

    python examples/parameter_server.py [--workers 4 --launcher processes]

The server holds the weights of a linear regression. Each worker repeatedly pulls the weights,
computes a gradient on its own shard of data, and pushes it back without waiting for the others
(asynchronous SGD). The coordinator polls the loss and ends the program when it is small.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import threading
import time

import numpy as np

from shoal.launch import FunctionNode, Program, ServiceNode, launch, should_stop

DIM = 20


def make_data(seed: int, n: int = 256):
    rng = np.random.default_rng(seed)
    true_w = np.linspace(-1, 1, DIM)
    x = rng.normal(size=(n, DIM))
    return x, x @ true_w + 0.01 * rng.normal(size=n)


class ParameterServer:
    def __init__(self, learning_rate: float = 0.05) -> None:
        self.w = np.zeros(DIM)
        self.version, self.lr = 0, learning_rate
        self._lock = threading.Lock()

    def get(self):
        with self._lock:
            return self.version, self.w.copy()

    def push(self, gradient) -> int:
        with self._lock:
            self.w -= self.lr * np.asarray(gradient)
            self.version += 1
            return self.version

    def loss(self) -> float:
        x, y = make_data(seed=999)
        with self._lock:
            return float(np.mean((x @ self.w - y) ** 2))


class Worker:
    def __init__(self, server, worker_id: int) -> None:
        self.server, self.x, self.y = server, *make_data(worker_id)
        self.pushes = 0

    def run(self) -> None:
        while not should_stop():
            _, w = self.server.get()
            gradient = 2 * self.x.T @ (self.x @ w - self.y) / len(self.y)
            self.server.push(gradient)
            self.pushes += 1


def coordinator(server, target_loss: float, timeout_s: float) -> dict:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        loss = server.loss()
        if loss < target_loss:
            break
        time.sleep(0.05)
    version, _ = server.get()
    return {"loss": loss, "updates": version, "seconds": round(time.monotonic() - start, 2)}


def make_program(num_workers: int, target_loss: float = 1e-3, timeout_s: float = 60.0) -> Program:
    program = Program("parameter_server")
    server = program.add_node(ServiceNode(ParameterServer), label="server")
    with program.group("worker"):
        for i in range(num_workers):
            program.add_node(ServiceNode(Worker, server, i))
    program.add_node(FunctionNode(coordinator, server, target_loss, timeout_s), label="coordinator")
    return program


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--launcher", default="processes", choices=["processes", "inprocess", "ray"])
    parser.add_argument("--ray-address", default=None, help="Ray cluster to join (default: a local one)")
    args = parser.parse_args()
    run_dir = tempfile.mkdtemp(prefix="shoal-parameter_server-")  # the node logs and the address book
    run = launch(make_program(args.workers), args.launcher, ray_address=args.ray_address, run_dir=run_dir)
    results = run.wait(timeout_s=120)
    print(run.summary())
    print(json.dumps(results["coordinator"]))
    shutil.rmtree(run_dir)  # (only once the program ended well: a failure's message points at its logs)
