"""Only ``memoryd/fsio/`` creates, renames or deletes files (docs/reference/files.md): a walk of the daemon's source fails
on a file-mutating call anywhere else, and on a workspace write in the domain that does not pass ``root=`` (the
confined, no-follow walk)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "memoryd"

# os / shutil functions that create, rename or delete (modules called by attribute: os.unlink(...))
MODULE_CALLS = {
    "os": {
        "unlink",
        "remove",
        "rename",
        "renames",
        "replace",
        "rmdir",
        "removedirs",
        "mkdir",
        "makedirs",
        "symlink",
        "link",
        "mkfifo",
        "mknod",
        "truncate",
    },
    "shutil": {"rmtree", "move", "copy", "copy2", "copyfile", "copytree"},
    "tempfile": {"mkstemp", "mkdtemp", "NamedTemporaryFile", "TemporaryDirectory"},
}
# pathlib.Path methods that do the same (any receiver: the names are not used for anything else in the daemon)
METHODS = {"unlink", "rename", "rmdir", "mkdir", "touch", "write_text", "write_bytes", "symlink_to", "hardlink_to"}
WRITE_FLAGS = {"O_CREAT", "O_WRONLY", "O_RDWR", "O_APPEND", "O_TRUNC"}
# fsio's writers: in the domain (notes, rules, context) each must name the workspace root it stays in
FSIO_WRITERS = {
    "atomic_write",
    "append_line",
    "append_block",
    "remove",
    "remove_tree",
    "make_dirs",
    "rename",
    "open_lock_file",
}
DOMAIN = ("notes", "rules")


def _offences(path: Path, rel: str | None = None) -> list[str]:
    """The file-mutating calls in ``path`` (named ``rel``, as under the repository root)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    rel = rel or path.relative_to(ROOT.parent).as_posix()
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        where = f"{rel}:{node.lineno}"
        if isinstance(func, ast.Attribute):
            owner = func.value.id if isinstance(func.value, ast.Name) else None
            if owner in MODULE_CALLS and func.attr in MODULE_CALLS[owner]:
                out.append(f"{where}: {owner}.{func.attr}")
            elif owner != "fsio":
                if func.attr in METHODS:
                    out.append(f"{where}: .{func.attr}()")
                # Path.replace(target): one positional argument, no keywords (str.replace takes two)
                if func.attr == "replace" and len(node.args) == 1 and not node.keywords and owner != "dataclasses":
                    out.append(f"{where}: .replace()")
            if owner == "os" and func.attr == "open" and len(node.args) > 1:
                flags = {n.attr for n in ast.walk(node.args[1]) if isinstance(n, ast.Attribute)}
                if flags & WRITE_FLAGS:
                    out.append(f"{where}: os.open for writing")
            in_domain = rel.split("/")[1] in DOMAIN
            name = func.attr if owner in ("fsio",) else None
            if in_domain and name in FSIO_WRITERS and not any(k.arg == "root" for k in node.keywords):
                out.append(f"{where}: fsio.{name} without root=")
        elif isinstance(func, ast.Name):
            if func.id == "open" and _writes(node):
                out.append(f"{where}: open() for writing")
            if (
                rel.split("/")[1] in DOMAIN
                and func.id in FSIO_WRITERS
                and not any(k.arg == "root" for k in node.keywords)
            ):
                out.append(f"{where}: {func.id} without root=")
    return out


def _writes(node: ast.Call) -> bool:
    mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
    if mode is None:
        return False
    return not isinstance(mode, ast.Constant) or any(c in str(mode.value) for c in "wax+")


def test_only_fsio_mutates_files() -> None:
    offences = []
    for path in sorted(ROOT.rglob("*.py")):
        if path.parent == ROOT / "fsio":
            continue
        offences += _offences(path)
    assert offences == [], "file-mutating calls outside memoryd/fsio/:\n" + "\n".join(offences)


def test_the_walk_finds_what_it_looks_for(tmp_path: Path) -> None:
    """The checker itself can fail: each kind of offence in a sample module is found."""
    sample = tmp_path / "sample.py"
    code = (
        "import os, shutil\nfrom pathlib import Path\nfrom memoryd.fsio import atomic_write\n"
        "os.unlink('x')\nshutil.rmtree('d')\nPath('x').write_text('y')\nPath('a').replace(Path('b'))\n"
        "open('f', 'w')\nos.open('f', os.O_WRONLY | os.O_CREAT)\natomic_write(Path('p'), b'')\n"
        "'abc'.replace('a', 'b')\nopen('f')\natomic_write(Path('p'), b'', root=Path('.'))\n"
    )
    sample.write_text(code, encoding="utf-8")
    found = _offences(sample, "memoryd/rules/sample.py")
    assert [f.split(": ", 1)[1] for f in found] == [
        "os.unlink",
        "shutil.rmtree",
        ".write_text()",
        ".replace()",
        "open() for writing",
        "os.open for writing",
        "atomic_write without root=",
    ]
