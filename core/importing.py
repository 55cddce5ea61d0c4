"""Importing what a user names by its path (``module:attribute``, or ``path/to/file.py:attribute``):
an agent's builder, an env factory, a module that registers an env. Whatever goes wrong is one
line naming the path."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from types import ModuleType
from typing import Any

import cloudpickle


def import_module_for(module: str, what: str) -> ModuleType:
    """``importlib.import_module(module)``, or the file ``module`` names if it ends in ``.py``
    (see ``import_file``); a ``ValueError`` (one line, naming ``what`` the module is imported
    for) if it is not found or raises while it is imported."""
    try:
        if module.endswith(".py"):
            return import_file(module)
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


def import_file(path: str) -> ModuleType:
    """The module in the Python file ``path`` (relative to the working directory), imported once
    per file under a name of its own (``shoal_file_<stem>_<hash of its absolute path>``: a file
    called ``json.py`` shadows nothing). Its classes and functions travel to a distributed run's
    node processes by value (cloudpickle), so those need not find the file on their path."""
    full = os.path.abspath(path)
    stem = os.path.splitext(os.path.basename(full))[0]
    name = f"shoal_file_{stem}_{hashlib.sha1(full.encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    if not os.path.isfile(full):
        raise FileNotFoundError(f"no file {path!r} (from {os.getcwd()})")
    spec = importlib.util.spec_from_file_location(name, full)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path!r} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (before it runs: dataclasses look their module up)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    try:
        cloudpickle.register_pickle_by_value(module)
    except ImportError:  # (no distributed launcher in this install)
        pass
    return module
