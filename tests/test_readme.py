"""The README's Python API example runs as a reader would paste it: the first ```python block
under the ``## Python API`` heading, in a fresh interpreter, in an empty directory. And the
README's quickstart installs what training needs and nothing more, while ``.ci/run`` installs
the project the way the quickstart says, trains the quickstart's run on that install, and runs
the very test command the README gives (which installs the rest)."""

import os
import re
import subprocess
import sys

import pytest

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")
CI = os.path.join(os.path.dirname(README), ".ci", "run")
HEADING = "## Python API"


def first_block(heading: str, language: str) -> str:
    """The first ```language block of README.md's ``heading`` section (up to the next ``## ``)."""
    with open(README, encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert heading in lines, f"README.md has no line {heading!r}"
    section = []
    for line in lines[lines.index(heading) + 1 :]:
        if re.match(r"##\s", line):
            break
        section.append(line)
    text = "\n".join(section)
    found = re.search(rf"^```{language}[ \t]*\n(.*?)^```[ \t]*$", text, re.M | re.S)
    assert found, f"README.md's {heading!r} section has no ```{language} block"
    return found.group(1)


def python_api_example() -> str:
    """The first ```python block of the ``## Python API`` section."""
    return first_block(HEADING, "python")


def quickstart() -> tuple[str, str]:
    """The quickstart's install command (the last ``&&`` part of its first line) and its run."""
    first, run = first_block("## Quickstart", "bash").strip().splitlines()[:2]
    return first.split("&&")[-1].strip(), run.strip()


def readme_test_command() -> str:
    """The README's test command: the one line of the ``## Tests`` section's bash block."""
    [line] = first_block("## Tests", "bash").strip().splitlines()
    return line.strip()


def test_the_quickstart_installs_what_training_needs_and_no_extra():
    """(It installed ``.[dev]``: Ray, MuJoCo, ALE, W&B, MLflow and the test tools, to train CartPole.)"""
    install, run = quickstart()
    assert install == "pip install -e .", install
    assert run.startswith("shoal train "), run
    command = readme_test_command()
    assert re.match(r"pip install -e '\.\[dev\]' (&& pip install --no-deps -r \S+ )?&& python -m pytest ", command), (
        command
    )


def test_ci_installs_and_tests_as_the_readme_says():
    """Each virtualenv of ``.ci/run`` installs the project with the quickstart's command (the
    line that makes the venv ends with it), and later runs the README's test command, word for
    word; ``dev`` is installed by that command only; the 3.11 venv trains the quickstart's run
    before anything else is installed."""
    install, run = quickstart()
    command = readme_test_command()
    with open(CI, encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip() and not line.lstrip().startswith("#")]
    venvs = [i for i, line in enumerate(lines) if " -m venv .venv" in line]
    assert len(venvs) == 2, f".ci/run makes {len(venvs)} project venvs (.venv, .venv312), expected 2"
    for n, start in enumerate(venvs):
        end = venvs[n + 1] if n + 1 < len(venvs) else len(lines)
        assert lines[start].endswith("&& " + install), (
            f".ci/run installs with {lines[start]!r}, not the README's {install!r}"
        )
        block = lines[start + 1 : end]
        assert command in block, f".ci/run's venv {n} never runs the README's test command {command!r}"
        assert not [line for line in block[: block.index(command)] if "[dev]" in line], (
            f".ci/run's venv {n} installs dev before the README's test command does"
        )
    first = lines[venvs[0] + 1 :]
    assert first.index(run) < first.index(command), (
        f".ci/run does not run the quickstart's {run!r} on the quickstart's install"
    )


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
