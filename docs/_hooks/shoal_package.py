"""mkdocs hook: lets mkdocstrings (griffe) find the package ``shoal`` by reading source.

The package ``shoal`` is the repository root itself (``package-dir = {"shoal" = "."}`` in
pyproject.toml), and a checkout's directory may have any name (``main``, ``shoal-1``, ...).
Griffe loads a package statically by finding a directory of that name on its search paths,
and its reading of setuptools' editable-install finder assumes the mapped directory carries the
package's name. So, before mkdocstrings builds its handler (lazily, at the first ``:::``), this
hook makes a temporary directory holding one link ``shoal -> <repository root>`` and puts it
first on ``sys.path``, from which mkdocstrings-python takes griffe's search paths. The link
lives outside the repository (no loop for tools that walk it) and is removed after the build.
Nothing is imported: the API reference is read from source.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

from mkdocs.plugins import event_priority

_made: list[str] = []


@event_priority(100)  # before mkdocstrings' on_config, which builds its handlers
def on_config(config, **kwargs):
    root = os.path.dirname(os.path.abspath(config.config_file_path))
    if os.path.basename(root) != "shoal":
        link_dir = tempfile.mkdtemp(prefix="shoal-docs-")
        os.symlink(root, os.path.join(link_dir, "shoal"))
        _made.append(link_dir)
        sys.path.insert(0, link_dir)
    else:
        sys.path.insert(0, os.path.dirname(root))
    return config


def on_shutdown(**kwargs):
    while _made:
        link_dir = _made.pop()
        if link_dir in sys.path:
            sys.path.remove(link_dir)
        shutil.rmtree(link_dir, ignore_errors=True)
