"""JAX's persistent compilation cache, which the ``shoal`` command line turns on.

Compiled updates and policies are kept on disk, keyed by the computation, JAX version and
device, so a run after the first skips the compiler: about 1.3 s of a 3 s PPO CartPole run on
2 CPU cores. ``SHOAL_COMPILATION_CACHE`` names the directory (default
``$XDG_CACHE_HOME/shoal/jax``, i.e. ``~/.cache/shoal/jax``), or ``off``. From Python, call
``enable_compilation_cache()`` before the first compilation if you want the same.
"""

from __future__ import annotations

import os

import jax

from shoal.core import environment_variables as variables

ENV = "SHOAL_COMPILATION_CACHE"


def default_directory() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "shoal", "jax")


def enable_compilation_cache() -> str | None:
    """Turns the cache on for this process and the node processes it starts; returns its
    directory, or ``None`` if ``SHOAL_COMPILATION_CACHE=off``."""
    path = variables.value(ENV) or default_directory()
    if path.lower() == "off":
        return None
    os.makedirs(path, exist_ok=True)
    settings = {
        "jax_compilation_cache_dir": path,  # every compilation, however quick or small
        "jax_persistent_cache_min_compile_time_secs": 0.0,
        "jax_persistent_cache_min_entry_size_bytes": 0,
    }
    for name, value in settings.items():
        os.environ.setdefault(name.upper(), str(value))  # read by JAX in node processes

    for name, value in settings.items():
        jax.config.update(name, value)
    return path
