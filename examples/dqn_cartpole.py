"""Train DQN on CartPole-v1 in one process, from Python rather than the CLI.

    python examples/dqn_cartpole.py

The same `ExperimentConfig` is what the CLI builds; change the agent settings here.
"""

from shoal.agents import get_builder
from shoal.launch import EnvConfig, ExperimentConfig, RunConfig, run_experiment

if __name__ == "__main__":
    builder = get_builder("dqn", learning_rate=4e-3, n_step=3)  # any DQNConfig field
    config = ExperimentConfig(
        builder=builder,
        env=EnvConfig("CartPole-v1"),  # groups: docs/configuration.md
        run=RunConfig(seed=0, max_env_steps=100_000, dir="runs/example-dqn-cartpole"),
    )
    result = run_experiment(config)
    print(result)
