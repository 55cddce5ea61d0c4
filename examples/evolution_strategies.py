"""Evolution Strategies on CartPole-v1 (the Launchpad paper's third example).

    python examples/evolution_strategies.py [--workers 4 --population 32]

The policy is linear: push right iff ``obs @ w + b > 0``. Each iteration the coordinator sends
every worker the current parameters and a list of noise seeds; a worker rebuilds each noise
vector ``eps`` from its seed and returns the episode returns of ``theta + sigma*eps`` and
``theta - sigma*eps`` (antithetic pairs). The coordinator turns the centered ranks of those
returns into the gradient estimate ``g = sum_i (R+_i - R-_i) eps_i / (2 n sigma)`` and takes an
optax SGD step (on ``-g``, since optax minimizes; plain SGD beats Adam here because the sign
policy ignores the scale of ``theta``). It stops when the mean return of the
current parameters over 10 episodes reaches the target.
"""

from __future__ import annotations

import argparse
import json

import gymnasium as gym
import numpy as np

from shoal.launch import FunctionNode, Program, ServiceNode, launch

DIM = 5  # 4 weights + bias


def noise(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=DIM)


def episode_return(env: gym.Env, theta: np.ndarray, seed: int) -> float:
    obs, _ = env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(int(obs @ theta[:4] + theta[4] > 0))
        total += reward
        done = terminated or truncated
    return total


class ESWorker:
    def __init__(self, worker_id: int) -> None:
        self.env = gym.make("CartPole-v1")
        self.worker_id = worker_id

    def evaluate(self, theta, seeds: list, sigma: float) -> list:
        theta = np.asarray(theta)
        return [(episode_return(self.env, theta + sigma * noise(s), s),
                 episode_return(self.env, theta - sigma * noise(s), s)) for s in seeds]

    def mean_return(self, theta, episodes: int, seed: int) -> float:
        return float(np.mean([episode_return(self.env, np.asarray(theta), seed + i) for i in range(episodes)]))


def centered_ranks(x: np.ndarray) -> np.ndarray:
    ranks = np.empty(x.size)
    ranks[x.ravel().argsort()] = np.arange(x.size)
    return (ranks / (x.size - 1) - 0.5).reshape(x.shape)


def coordinator(workers: list, population: int, sigma: float, learning_rate: float,
                max_iterations: int, target: float) -> dict:
    import optax

    theta = np.zeros(DIM)
    optimizer = optax.sgd(learning_rate)
    opt_state = optimizer.init(theta)
    rng = np.random.default_rng(0)
    score = 0.0
    for iteration in range(1, max_iterations + 1):
        seeds = rng.integers(0, 2**31, population // 2).tolist()
        shards = [seeds[i::len(workers)] for i in range(len(workers))]
        futures = [w.futures.evaluate(theta, shard, sigma) for w, shard in zip(workers, shards)]
        returns = np.array([pair for f in futures for pair in f.result(timeout=120)])  # [n, 2]
        order = [s for shard in shards for s in shard]
        ranked = centered_ranks(returns)
        gradient = sum((r[0] - r[1]) * noise(s) for r, s in zip(ranked, order)) / (2 * len(order) * sigma)
        updates, opt_state = optimizer.update(-gradient, opt_state, theta)
        theta = np.asarray(optax.apply_updates(theta, updates))
        score = workers[iteration % len(workers)].mean_return(theta, 10, 10_000 + iteration)
        print(f"[coordinator] iteration {iteration}: mean return {score:.1f}", flush=True)
        if score >= target:
            break
    return {"iterations": iteration, "mean_return": score, "solved": score >= target,
            "theta": [round(float(t), 4) for t in theta]}


def make_program(num_workers: int, population: int = 32, sigma: float = 0.1,
                 learning_rate: float = 1.0, max_iterations: int = 50, target: float = 475.0) -> Program:
    program = Program("evolution_strategies")
    with program.group("worker"):
        workers = [program.add_node(ServiceNode(ESWorker, i)) for i in range(num_workers)]
    program.add_node(FunctionNode(coordinator, workers, population, sigma, learning_rate,
                                  max_iterations, target), label="coordinator")
    return program


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--population", type=int, default=32)
    parser.add_argument("--max-iterations", type=int, default=50)
    parser.add_argument("--target", type=float, default=475.0)
    parser.add_argument("--launcher", default="processes", choices=["processes", "inprocess", "ray"])
    parser.add_argument("--ray-address", default=None, help="Ray cluster to join (default: a local one)")
    args = parser.parse_args()
    run = launch(make_program(args.workers, args.population, max_iterations=args.max_iterations,
                              target=args.target), args.launcher, ray_address=args.ray_address)
    results = run.wait(timeout_s=600)
    print(run.summary())
    print(json.dumps(results["coordinator"]))
