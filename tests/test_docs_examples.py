"""The docs' Python blocks: every one compiles; the getting-started page's entry points run as
written (a slow test: it trains three times)."""

import glob
import os
import re
import subprocess
import sys

import pytest

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")
PAGES = sorted(glob.glob(os.path.join(DOCS, "**", "*.md"), recursive=True))


def python_blocks(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return re.findall(r"^```python[ \t]*\n(.*?)^```[ \t]*$", f.read(), re.M | re.S)


@pytest.mark.parametrize("page", [os.path.relpath(p, DOCS) for p in PAGES if python_blocks(p)])
def test_every_python_block_of_the_docs_is_python(page):
    for i, code in enumerate(python_blocks(os.path.join(DOCS, page))):
        compile(code, f"{page} (block {i})", "exec")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_getting_started_entry_points_run_as_written(tmp_path):
    """The "three entry points side by side" block: one process, a program of processes in a
    directory of its own, and a resume of the first run."""
    [code] = [block for block in python_blocks(os.path.join(DOCS, "getting-started.md")) if "resume_experiment(" in block]
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=850)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-2000:]}\nstderr:\n{proc.stderr[-3000:]}"
