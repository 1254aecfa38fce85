"""Git as the way memory travels: the merge driver git runs on memory files (``memoryctl merge-file %O %A %B``)
and its registration in a repository (``memoryctl init --git``). Neither needs the daemon.

The driver merges by section union (``memorysections.merge3``): no conflict markers, no lost bullet. It writes the
result to %A and exits 0. A file it will not read (larger than ``MAX_BYTES``) is handed to ``git merge-file``, so
git's usual conflict markers and exit status apply to it alone.

Registration writes (or extends) the workspace's ``.gitattributes`` with ``merge=memoryd`` for the memory files and
sets ``merge.memoryd.driver`` and ``merge.memoryd.name`` in the repository's own config (``.git/config``: each
clone registers once, nothing global). Running it again changes nothing and says so.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # `import typing` costs ~3 ms of start-up
if TYPE_CHECKING:
    import subprocess
    from typing import Any

MAX_BYTES = 64 * 1024 * 1024  # each of the three versions; above it git's own line merge runs
DRIVER = "memoryd"
DRIVER_NAME = "memoryd: Markdown memory merged by section (memoryctl merge-file)"
PATTERNS = ("memory/MEMORY.md", "memory/INSIGHTS.md", "memory/[0-9]*.md", "memory/archive/[0-9]*.md")
ATTRIBUTES_HEADER = "# memoryd: memory files merge by section, never with conflict markers (memoryctl init --git)"


class GitError(Exception):
    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


# --- the driver -------------------------------------------------------------------------------------------------


def _read(path: str) -> bytes | None:
    """The file's bytes, or None when it is larger than MAX_BYTES."""
    with open(path, "rb") as f:
        data = f.read(MAX_BYTES + 1)
    return None if len(data) > MAX_BYTES else data


def merge_file(base: str, ours: str, theirs: str) -> int:
    """Merge ``theirs`` into ``ours`` against ``base`` (git's %O %A %B), the result written over ``ours``; the
    exit status git reads (0: merged)."""
    texts = [_read(path) for path in (base, ours, theirs)]
    if any(t is None for t in texts):
        import subprocess  # here: the driver's usual path starts no process

        sys.stderr.write(
            f"memoryctl merge-file: a version is larger than {MAX_BYTES >> 20} MiB; git merge-file merges it\n"
        )
        done = subprocess.run(["git", "merge-file", "-L", "ours", "-L", "base", "-L", "theirs", ours, base, theirs])
        return 0 if done.returncode == 0 else 1
    from memorysections import merge3  # here, not at the top: no other verb loads it

    # bytes that are not UTF-8 go through as lone surrogates and come back as the same bytes
    b, o, t = (data.decode("utf-8", "surrogateescape") for data in texts if data is not None)
    merged = merge3(b, o, t).encode("utf-8", "surrogateescape")
    # %A is git's temporary file: git reads it back when we exit, so neither fsync (up to ~25 ms on a 1 MB file
    # here) nor a rename buys anything; a failed write exits non-zero and git reports a conflict
    with open(ours, "wb") as f:
        f.write(merged)
    return 0


# --- registration -----------------------------------------------------------------------------------------------


def _git(root: str, *args: str) -> subprocess.CompletedProcess[str]:
    import subprocess

    try:
        return subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise GitError(
            "git is not installed (or not on PATH)", "Install git, or run memoryctl init without --git."
        ) from None


def driver_command() -> str:
    """The command git runs: ``memoryctl merge-file %O %A %B`` when the ``memoryctl`` on PATH is this one (the
    console script beside this Python, as a venv or pipx installs it); else this Python running memoryctl by
    module, so an older memoryctl earlier on PATH, or none, never gets git's merges (a driver that fails leaves
    git's conflict with only our side in the file)."""
    import shutil

    found = shutil.which("memoryctl")
    here = os.path.dirname(os.path.abspath(sys.executable))
    if found and os.path.dirname(os.path.realpath(found)) in (here, os.path.realpath(here)):
        return "memoryctl merge-file %O %A %B"
    import shlex

    return f"{shlex.quote(sys.executable)} -m memoryctl merge-file %O %A %B"


def _attribute_lines(text: str) -> tuple[str, list[dict[str, str]]]:
    """``.gitattributes`` with every memory pattern given ``merge=memoryd``: the new text and what changed."""
    lines = text.splitlines(keepends=True)
    done: list[dict[str, str]] = []
    missing = []
    for pattern in PATTERNS:
        for i, line in enumerate(lines):
            words = line.split()
            if not words or words[0] != pattern:
                continue
            merges = [w for w in words[1:] if w.startswith("merge=") or w in ("merge", "-merge", "!merge")]
            if merges == [f"merge={DRIVER}"]:
                done.append({"pattern": pattern, "action": "unchanged"})
            elif merges:
                done.append({"pattern": pattern, "action": f"left as is ({' '.join(merges)})"})
            else:
                ending = line[len(line.rstrip("\r\n")) :]
                lines[i] = line.rstrip("\r\n") + f" merge={DRIVER}" + ending
                done.append({"pattern": pattern, "action": "extended"})
            break
        else:
            missing.append(pattern)
    if missing:
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        if lines and lines[-1].strip():
            lines.append("\n")
        lines.append(ATTRIBUTES_HEADER + "\n")
        lines += [f"{pattern} merge={DRIVER}\n" for pattern in missing]
        done += [{"pattern": pattern, "action": "added"} for pattern in missing]
    return "".join(lines), done


def _write_attributes(path: str, text: str) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8", newline="") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def setup(root: str) -> dict[str, Any]:
    """Register the merge driver for the workspace at ``root`` (inside a git repository): what was done."""
    top = _git(root, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise GitError(f"{root} is not in a git repository", "Run git init (or clone) first, or drop --git.")
    path = os.path.join(root, ".gitattributes")
    try:
        with open(path, encoding="utf-8", newline="") as f:
            before = f.read()
    except FileNotFoundError:
        before = ""
    after, attributes = _attribute_lines(before)
    if after != before:
        _write_attributes(path, after)
    config = []
    for key, value in ((f"merge.{DRIVER}.name", DRIVER_NAME), (f"merge.{DRIVER}.driver", driver_command())):
        current = _git(root, "config", "--local", "--get", key)
        if current.returncode == 0 and current.stdout.rstrip("\n") == value:
            config.append({"key": key, "value": value, "action": "unchanged"})
            continue
        done = _git(root, "config", "--local", key, value)
        if done.returncode != 0:
            raise GitError(f"git config {key} failed: {done.stderr.strip()}", "Check that .git/config is writable.")
        config.append({"key": key, "value": value, "action": "set" if current.returncode else "updated"})
    return {
        "repository": top.stdout.strip(),
        "gitattributes": path,
        "attributes": attributes,
        "config": config,
    }


def render(report: dict[str, Any]) -> str:
    """What ``setup`` did, for a person."""
    out = [f"git: {report['gitattributes']}"]
    out += [f"  {a['pattern']} merge={DRIVER}: {a['action']}" for a in report["attributes"]]
    out.append(f"git: git config --local in {report['repository']}")
    out += [f"  {c['key']} = {c['value']}: {c['action']}" for c in report["config"]]
    out.append("memory files now merge by section on git pull, merge and rebase (docs/howto/git.md)")
    return "\n".join(out)
