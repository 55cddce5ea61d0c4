"""The docs' Python blocks: every one compiles; the getting-started page's entry points run as
written (a slow test: it trains three times); the numbers the docs quote from seeded runs are
recorded with their stack, and rerun where the stack is the same."""

import glob
import importlib.metadata
import json
import os
import re
import shlex
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
    [code] = [
        block for block in python_blocks(os.path.join(DOCS, "getting-started.md")) if "resume_experiment(" in block
    ]
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=850)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-2000:]}\nstderr:\n{proc.stderr[-3000:]}"


# Numbers the docs quote from a seeded run: each is recorded in docs/results/<name>.json (the
# command, the stack it ran on, a label naming that stack, the fields a rerun must match, and
# the result lines), every page that quotes it quotes the record and names its stack, and where
# this Python's stack is the recorded one, the command runs again and gives the same numbers.
ROOT = os.path.dirname(DOCS)
RESULTS = os.path.join(DOCS, "results")
STACK_PACKAGES = ("jax", "jaxlib", "flax", "optax", "numpy", "gymnasium")


def record(name: str) -> dict:
    with open(os.path.join(RESULTS, f"{name}.json"), encoding="utf-8") as f:
        return json.load(f)


def page_text(page: str) -> str:
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        return " ".join(f.read().split())  # (a quote may wrap across lines)


def quoted_fields(page: str, command: str) -> dict:
    """The ``"key": value`` pairs of the page's ```json block that follows ``command``."""
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        text = f.read()
    assert command in text, f"{page} does not give the command {command!r}"
    found = re.search(r"^```json[ \t]*\n(.*?)^```", text[text.index(command) :], re.M | re.S)
    assert found, f"{page} shows no result line after {command!r}"
    return {
        key: json.loads(value) for key, value in re.findall(r'"(\w+)": ("[^"]*"|true|false|-?[\d.]+)', found.group(1))
    }


def same_stack(stack: dict) -> str | None:
    """``None`` where this Python runs the recorded stack; else what differs, in words."""
    if stack["replay"] == "native" and sys.version_info < (3, 12):
        return "here the default replay is Reverb, whose sampling is not seeded"
    differ = []
    for package in STACK_PACKAGES:
        try:
            here = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            here = None
        if here != stack[package]:
            differ.append(f"{package} {here} (recorded: {stack[package]})")
    return ", ".join(differ) or None


def test_the_quickstart_result_line_is_the_recorded_one_and_names_its_stack():
    """(The README showed 4,000 env steps and 1,512 learner steps, which no install printed.)"""
    quick = record("quickstart")
    [result] = quick["results"]
    for page in ("README.md", "docs/getting-started.md"):
        fields = quoted_fields(page, quick["command"])
        for key in quick["checked"] + ["agent", "env", "seed"]:
            assert fields.get(key) == result[key], (
                f"{page} quotes {key}={fields.get(key)!r}, the record {result[key]!r}"
            )
        assert quick["label"] in page_text(page), (
            f"{page} does not name the stack of its result line ({quick['label']!r})"
        )


def test_the_qrdqn_returns_quoted_are_the_recorded_ones_and_name_their_stack():
    """(docs/own-agent.md promised 326 at seed 0; Python 3.12 gives 238.)"""
    qr = record("qrdqn-cartpole")
    returns = [f"{r['final_eval_return']:.1f}" for r in qr["results"]]
    text = page_text("docs/own-agent.md")
    assert f"{', '.join(returns[:-1])} and {returns[-1]}" in text, f"docs/own-agent.md does not quote {returns}"
    assert qr["label"] in text and "docs/results/qrdqn-cartpole.json" in text
    assert qr["command"].replace("{seed}", "N") in text


def rerun(quick: dict, seed: int, tmp_path) -> None:
    why = same_stack(quick["stack"])
    if why:
        pytest.skip(f"not the recorded stack ({quick['label']}): {why}")
    expected = next(r for r in quick["results"] if r["seed"] == seed)
    command = shlex.split(quick["command"].format(seed=seed))
    assert command[0] == "shoal"
    proc = subprocess.run(
        [sys.executable, "-m", "shoal", *command[1:], "--quiet", "--run-dir", str(tmp_path / "run")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {k: got[k] for k in quick["checked"]} == {k: expected[k] for k in quick["checked"]}, (
        f"{quick['command']} on {quick['label']} no longer prints what docs/results records: rerun it and update the record and the pages quoting it"
    )


@pytest.mark.e2e  # (it trains)
@pytest.mark.timeout(420)
def test_the_quickstart_run_prints_the_recorded_counts(tmp_path):
    rerun(record("quickstart"), 0, tmp_path)


@pytest.mark.e2e  # (it trains)
@pytest.mark.timeout(420)
@pytest.mark.parametrize(
    "seed",
    [
        0,
        pytest.param(1, marks=pytest.mark.slow),
        pytest.param(2, marks=pytest.mark.slow),
        pytest.param(3, marks=pytest.mark.slow),
        pytest.param(4, marks=pytest.mark.slow),
    ],
)
def test_the_qrdqn_example_returns_the_recorded_numbers(seed, tmp_path):
    rerun(record("qrdqn-cartpole"), seed, tmp_path)


def shell_commands(page: str) -> list[str]:
    """The commands of a page's ```bash blocks, continuation lines joined, comments dropped."""
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        blocks = re.findall(r"^```bash[ \t]*\n(.*?)^```[ \t]*$", f.read(), re.M | re.S)
    joined = "\n".join(block.replace("\\\n", " ") for block in blocks)
    return [
        line.split(" #")[0].strip()
        for line in joined.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def test_every_many_agents_training_command_ends_by_itself():
    """PettingZoo's envs register no reward threshold: a ``shoal train`` there without
    ``--max-env-steps`` or ``--target-return`` ran the default budget with no end in sight on the
    page (the first two commands of docs/many-agents.md had neither)."""
    commands = [c for c in shell_commands("docs/many-agents.md") if c.startswith("shoal train")]
    assert len(commands) >= 5
    for command in commands:
        words = shlex.split(command)
        assert "--max-env-steps" in words or "--target-return" in words, f"no step budget nor target: {command}"


FRONT_PAGES = ("README.md", "docs/index.md", "docs/getting-started.md")


def quickstart_block(page: str) -> str:
    """The first ```bash block that installs the project (``pip install -e``)."""
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        blocks = re.findall(r"^```bash[ \t]*\n(.*?)^```[ \t]*$", f.read(), re.M | re.S)
    return next(b for b in blocks if "pip install -e" in b)


def test_the_front_pages_give_the_readme_quickstart_and_both_replay_backends():
    """(docs/index.md said ``python3.11 -m venv`` and ``pip install -e '.[dev]'``, and that actors
    write to "a Reverb replay service"; getting-started's first run had "an embedded Reverb
    server": on Python 3.12 and later replay is the native backend.) Every paragraph of these
    pages that names Reverb names the native backend too."""
    readme = quickstart_block("README.md")
    for page in FRONT_PAGES:
        assert quickstart_block(page) == readme, f"{page}'s quickstart is not the README's"
        with open(os.path.join(ROOT, page), encoding="utf-8") as f:
            prose = re.sub(r"^```.*?^```", "", f.read(), flags=re.M | re.S)
        for paragraph in re.split(r"\n\s*\n", prose):
            if "Reverb" in paragraph:
                assert "native" in paragraph, f"{page} speaks of Reverb alone: {' '.join(paragraph.split())[:200]}"
