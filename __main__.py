"""``python -m shoal ...`` is the ``shoal`` command line."""

from shoal.launch.experiments.cli import entry

entry()
