"""The ``shoal`` command line: its parser, its commands, ``compare`` and ``status``."""
