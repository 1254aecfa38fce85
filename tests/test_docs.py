"""Docs and schemas generated from the code are up to date; every error name is documented."""

from __future__ import annotations

import subprocess
import sys

from memoryd.errors import SPECS
from tests.conftest import ROOT


def test_generated_files_have_not_drifted() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "memoryd.docgen", "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr


def test_every_error_name_is_in_the_reference() -> None:
    text = (ROOT / "docs" / "reference" / "errors.md").read_text(encoding="utf-8")
    for name, spec in SPECS.items():
        assert f"`{name}` | {spec.code} |" in text


def test_error_codes_are_never_reused() -> None:
    app_codes = [s.code for s in SPECS.values() if s.code > -32100 and s.code <= -32000]
    assert len(app_codes) == len(set(app_codes))


def test_readme_quickstart_starts_with_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = readme.split("## Quickstart", 1)[1]
    first_block = quick.split("```", 2)[1].splitlines()[1:]  # drop the fence's language tag
    commands = [line.split("#")[0].strip() for line in first_block if line.split("#")[0].strip()]
    assert sorted(commands[:2]) == ["make run", "make test"]  # the two commands a fresh clone needs, first


def test_ci_runs_make_test() -> None:
    commands = [line.split("#")[0].strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert any(command.split()[:2] == ["make", "test"] or command.endswith("make test") for command in commands)


def test_the_repository_never_points_at_a_design_file_it_does_not_have() -> None:
    """The docs stand alone: a reader of a clone has no DESIGN.md (docs/reference/architecture.md and files.md
    hold what it said)."""
    offenders = [
        str(path.relative_to(ROOT))
        for pattern in ("*.md", "memoryd/**/*.py", "client/**/*.py", "bench/*.py", "docs/**/*.md")
        for path in ROOT.glob(pattern)
        if "DESIGN.md" in path.read_text(encoding="utf-8")
    ]
    assert offenders == []
