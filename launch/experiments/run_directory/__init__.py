"""A run's directory: owning it, its files' schemas, its checkpoints."""
