"""The README's Python API example runs as a reader would paste it: the first ```python block
under the ``## Python API`` heading, in a fresh interpreter, in an empty directory."""

import os
import re
import subprocess
import sys

import pytest

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")
HEADING = "## Python API"


def python_api_example() -> str:
    """The first ```python block of the ``## Python API`` section (up to the next ``## `` heading)."""
    with open(README, encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert HEADING in lines, f"README.md has no line {HEADING!r}"
    section = []
    for line in lines[lines.index(HEADING) + 1:]:
        if re.match(r"##\s", line):
            break
        section.append(line)
    text = "\n".join(section)
    found = re.search(r"^```python[ \t]*\n(.*?)^```[ \t]*$", text, re.M | re.S)
    assert found, f"README.md's {HEADING!r} section has no ```python block"
    return found.group(1)


def test_the_example_is_found_and_is_python():
    code = python_api_example()
    compile(code, "README.md", "exec")
    assert "import shoal" in code or "from shoal" in code


@pytest.mark.e2e  # (it trains)
@pytest.mark.timeout(420)
def test_the_readme_python_api_example_runs(tmp_path):
    code = python_api_example()
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-2000:]}\nstderr:\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr
