"""Evolution Strategies on CartPole-v1 (the Launchpad paper's third example).

    python examples/evolution_strategies.py [--workers 4 --population 32]

The policy is linear: push right iff ``obs @ w + b > 0``. Each iteration the coordinator sends
every worker the current parameters and a list of noise seeds; a worker rebuilds each noise
vector ``eps`` from its seed and returns the episode returns of ``theta + sigma*eps`` and
``theta - sigma*eps`` (antithetic pairs). The coordinator turns the centered ranks of those
returns into the gradient estimate ``g = sum_i (R+_i - R-_i) eps_i / (2 n sigma)`` and takes an
optax SGD step (on ``-g``, since optax minimizes). The sign policy ignores the scale of ``theta``,
so ``theta`` is put back on the unit sphere after each step: otherwise it grows, ``sigma`` shrinks
beside it, the perturbed returns tie and learning stalls. It stops when the mean return of the
current parameters over 10 episodes reaches the target.

A run is a function of its ``--seed`` alone: not of the launcher, the number of workers, the order
in which they answer, or the machine. The noise seeds come from one generator; the coordinator reads
the returns in the order it sent the seeds; the policy's dot product is summed in float64 in a fixed
order (a BLAS dot may sum in another order on another CPU, and one flipped action changes
the rest of the episode); and returns that tie share their mean rank (CartPole's returns are small
integers and tie often; a plain ``argsort`` orders ties by the sorting algorithm's internals, which
differ between NumPy builds and CPUs, e.g. with AVX-512, so they would move ``theta`` at random).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import tempfile

import gymnasium as gym
import numpy as np

from shoal.launch import FunctionNode, Program, ServiceNode, launch

DIM = 5  # 4 weights + bias


def noise(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=DIM)


def action(obs: np.ndarray, theta: np.ndarray) -> int:
    """1 (push right) iff ``obs @ w + b > 0``, summed in float64 in a fixed order on every machine."""
    total = float(theta[4])
    for o, w in zip(obs.tolist(), theta[:4].tolist()):
        total += o * w
    return int(total > 0)


def episode_return(env: gym.Env, theta: np.ndarray, seed: int) -> float:
    obs, _ = env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(action(obs, theta))
        total += reward
        done = terminated or truncated
    return total


class ESWorker:
    def __init__(self, worker_id: int) -> None:
        self.env = gym.make("CartPole-v1")
        self.worker_id = worker_id

    def evaluate(self, theta, seeds: list, sigma: float) -> list:
        theta = np.asarray(theta)
        return [
            (
                episode_return(self.env, theta + sigma * noise(s), s),
                episode_return(self.env, theta - sigma * noise(s), s),
            )
            for s in seeds
        ]

    def mean_return(self, theta, episodes: int, seed: int) -> float:
        return float(np.mean([episode_return(self.env, np.asarray(theta), seed + i) for i in range(episodes)]))


def centered_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks of ``x`` scaled to [-0.5, 0.5]; equal values share their mean rank, so the result does
    not depend on how a sort orders ties (and a pair of equal returns contributes no gradient)."""
    values, inverse = np.unique(x.ravel(), return_inverse=True)
    counts = np.bincount(inverse, minlength=values.size)
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])  # rank of each distinct value's first copy
    ranks = (first + (counts - 1) / 2)[inverse]
    return (ranks / (x.size - 1) - 0.5).reshape(x.shape)


def coordinator(
    workers: list,
    population: int,
    sigma: float,
    learning_rate: float,
    max_iterations: int,
    target: float,
    seed: int = 0,
) -> dict:
    import optax

    theta = np.zeros(DIM)
    optimizer = optax.sgd(learning_rate)
    opt_state = optimizer.init(theta)
    rng = np.random.default_rng(seed)
    score, scores = 0.0, []
    for iteration in range(1, max_iterations + 1):
        seeds = rng.integers(0, 2**31, population // 2).tolist()
        shards = [list(range(i, len(seeds), len(workers))) for i in range(len(workers))]  # seed indices
        futures = [w.futures.evaluate(theta, [seeds[j] for j in shard], sigma) for w, shard in zip(workers, shards)]
        returns = np.empty((len(seeds), 2))  # [n, 2], in the order of `seeds` whatever the number of workers
        for shard, future in zip(shards, futures):
            returns[shard] = future.result(timeout=120)
        ranked = centered_ranks(returns)
        gradient = sum((r[0] - r[1]) * noise(s) for r, s in zip(ranked, seeds)) / (2 * len(seeds) * sigma)
        updates, opt_state = optimizer.update(-gradient, opt_state, theta)
        theta = np.asarray(optax.apply_updates(theta, updates), dtype=np.float64)
        # The policy ignores the scale; the norm is summed in a fixed order (np.linalg.norm may call BLAS).
        theta = theta / max(math.sqrt(sum(t * t for t in theta.tolist())), 1e-12)
        score = workers[iteration % len(workers)].mean_return(theta, 10, 10_000 + iteration)
        scores.append(score)
        print(f"[coordinator] iteration {iteration}: mean return {score:.1f}", flush=True)
        if score >= target:
            break
    return {
        "iterations": iteration,
        "mean_return": score,
        "solved": score >= target,
        "theta": [round(float(t), 4) for t in theta],
        "mean_returns": scores,
    }


def make_program(
    num_workers: int,
    population: int = 32,
    sigma: float = 0.2,
    learning_rate: float = 0.1,
    max_iterations: int = 50,
    target: float = 475.0,
    seed: int = 0,
) -> Program:
    program = Program("evolution_strategies")
    with program.group("worker"):
        workers = [program.add_node(ServiceNode(ESWorker, i)) for i in range(num_workers)]
    program.add_node(
        FunctionNode(coordinator, workers, population, sigma, learning_rate, max_iterations, target, seed),
        label="coordinator",
    )
    return program


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--population", type=int, default=32)
    parser.add_argument("--max-iterations", type=int, default=50)
    parser.add_argument("--target", type=float, default=475.0)
    parser.add_argument("--seed", type=int, default=0, help="the run is a function of this seed alone")
    parser.add_argument("--launcher", default="processes", choices=["processes", "inprocess", "ray"])
    parser.add_argument("--ray-address", default=None, help="Ray cluster to join (default: a local one)")
    args = parser.parse_args()
    run_dir = tempfile.mkdtemp(prefix="shoal-evolution_strategies-")  # the node logs and the address book
    run = launch(
        make_program(
            args.workers, args.population, max_iterations=args.max_iterations, target=args.target, seed=args.seed
        ),
        args.launcher,
        ray_address=args.ray_address,
        run_dir=run_dir,
    )
    results = run.wait(timeout_s=600)
    print(run.summary())
    print(json.dumps(results["coordinator"]))
    shutil.rmtree(run_dir)  # (only once the program ended well: a failure's message points at its logs)
