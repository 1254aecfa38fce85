"""Docs and schemas generated from the code are up to date; every error name is documented."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from memoryd.errors import SPECS
from memoryd.models import DEGRADED_REASONS
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


def _source_files() -> list[Path]:
    return [
        p
        for p in [*(ROOT / "memoryd").rglob("*.py"), *(ROOT / "client" / "memoryctl").rglob("*.py")]
        if p.name != "errors.py"
    ]


def test_every_error_in_use_is_raised_somewhere_and_no_retired_one_is() -> None:
    """Issue 19 §4: MEMORY_FTS_DISABLED and MEMORY_STATUS_FAILED were documented and never raised. A name is either
    used by the code or retired (errors.py says why, errors.md lists it apart)."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in _source_files())
    unused = [name for name, spec in SPECS.items() if not spec.retired and f'"{name}"' not in text]
    raised_retired = [name for name, spec in SPECS.items() if spec.retired and f'"{name}"' in text]
    assert unused == [] and raised_retired == []
    reference = (ROOT / "docs" / "reference" / "errors.md").read_text(encoding="utf-8")
    retired = reference.split("## Retired", 1)[1]
    assert all((f"`{n}`" in retired) == bool(s.retired) for n, s in SPECS.items())


def _degraded_reasons_in_code() -> dict[str, str]:
    """Every constant reason given to Degraded, VectorsUnavailable or EmbeddingUnavailable in the daemon (the
    context's own Degraded, which names errors and 'stale', aside), with where."""
    found: dict[str, str] = {}
    for path in (ROOT / "memoryd").rglob("*.py"):
        if "context" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name not in {"Degraded", "VectorsUnavailable", "EmbeddingUnavailable"}:
                continue
            values = [*node.args[:1], *(k.value for k in node.keywords if k.arg == "reason")]
            for value in values:
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    found[value.value] = f"{path.relative_to(ROOT)}:{node.lineno}"
    return found


def test_the_stable_degraded_reasons_are_the_ones_the_code_gives() -> None:
    """Issue 19 §4: the documented list of degraded reasons missed six the code gives."""
    in_code = _degraded_reasons_in_code()
    assert len(in_code) > 10  # the scan finds them
    assert set(in_code) == set(DEGRADED_REASONS), in_code
    schema = (ROOT / "schemas" / "rpc" / "search.result.schema.json").read_text(encoding="utf-8")
    assert all(reason in schema for reason in DEGRADED_REASONS)


def test_the_workspaces_reference_names_every_write_a_locked_workspace_refuses() -> None:
    """Issue 19 §4: docs/reference/workspaces.md left forget and restore out of the writes that answer
    MEMORY_WORKSPACE_LOCKED. Those are the methods registered as writes, workspace.add/remove (the registry) aside."""
    from memoryd.app import build_dispatcher

    writes = {m.name for m in build_dispatcher().methods.values() if m.writes and not m.name.startswith("workspace.")}
    text = (ROOT / "docs" / "reference" / "workspaces.md").read_text(encoding="utf-8")
    paragraph = next(
        p
        for p in text.split("\n\n")
        if "answer\n`MEMORY_WORKSPACE_LOCKED`" in p or "answer `MEMORY_WORKSPACE_LOCKED`" in p
    )
    named = set(re.findall(r"`([a-z]+(?:\.[a-z]+)?)`", paragraph.split("MEMORY_WORKSPACE_LOCKED")[0]))
    assert writes <= named, writes - named


def test_the_search_score_describes_the_default_fusion() -> None:
    """Issue 19 §4: the score's description said reciprocal rank fusion while the default was weighted; it names the
    default (calibrated, decision 0011)."""
    from memoryd.config import Settings
    from memoryd.notes.api import SearchHit

    description = SearchHit.model_fields["score"].description or ""
    default = Settings().search.fusion
    assert default == "calibrated" and "calibrated, the default" in description


def test_the_generated_names_are_the_table_and_the_reasons() -> None:
    """memoryd/names.py (generated, checked for drift above) holds every error name in use and every reason."""
    import typing

    from memoryd import names

    assert set(typing.get_args(names.ErrorName)) == {n for n, s in SPECS.items() if not s.retired}
    assert typing.get_args(names.DegradedReason) == DEGRADED_REASONS


PROBE = """from __future__ import annotations

from memoryd.errors import AppError
from memoryd.methods.services import Ctx
from memoryd.models import Degraded
from memoryd.rpc import Context


class NotAnApp:
    version = "0"


def typos() -> None:
    Degraded(reason="vector_index_unusabel")
    raise AppError("MEMORY_NOT_A_NAME")


def wrong_app() -> Ctx:
    return Context(NotAnApp())
"""


def test_mypy_refuses_a_misspelt_name_and_an_app_that_is_not_the_services(tmp_path: Path) -> None:
    """Issue 20 item 3: an error name or a degraded reason that is not in the table fails mypy, and so does a
    request context whose app lacks what handlers may use (App itself is checked in memoryd/app.py)."""
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", str(probe)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    lines = [line for line in out.stdout.splitlines() if ": error:" in line]
    assert [line.split(":")[1] for line in lines] == ["14", "15", "19"], out.stdout
    assert '"Context" has incompatible type "NotAnApp"; expected "Services"' in lines[2]
