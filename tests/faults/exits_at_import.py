"""A plug-in module that exits while it is imported (``--agent tests.faults.exits_at_import:Builder``)."""

raise SystemExit(3)
