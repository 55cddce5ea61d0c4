"""Importing what a user names by its path (``module:attribute``): an agent's builder, an env
factory, a module that registers an env. Whatever goes wrong is one line naming the path."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


def import_module_for(module: str, what: str) -> ModuleType:
    """``importlib.import_module(module)``; a ``ValueError`` (one line, naming ``what`` the
    module is imported for) if it is not found or raises while it is imported."""
    try:
        return importlib.import_module(module)
    except (Exception, SystemExit) as e:  # noqa: BLE001 -- ImportError, whatever the module raised, exit(): one line
        first = str(e).splitlines()[0] if str(e) else ""
        raise ValueError(f"cannot import {module!r} for {what}: {type(e).__name__}: {first}") from None


def import_attribute(module: str, attribute: str, what: str) -> Any | None:
    """The (dotted) ``attribute`` of ``module``, imported as ``import_module_for`` does, or
    ``None`` if the module has no such attribute."""
    target: Any = import_module_for(module, what)
    for part in attribute.split("."):
        target = getattr(target, part, None)
        if target is None:
            return None
    return target
