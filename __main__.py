"""``python -m shoal ...`` is the ``shoal`` command line."""

import sys

from shoal.launch.experiments.cli import main

sys.exit(main())
