"""Reading memory files for ``get`` and checking them for ``validate``: plain functions over a workspace's root
and the limits they are given (the service passes its settings down)."""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path
from typing import Any

from memoryd.errors import AppError
from memoryd.fsio import FileTooLarge, NotRegularFile, confine, read_regular, within
from memoryd.notes import daily
from memoryd.store.prepare import NOT_UTF8, SUFFIXES, file_kind, kind_of, refusal, shown, utf8_name

GET_HINT = (
    "Name a memory file relative to the workspace root, as search prints it: memory/*.md, or rule YAML under "
    "spec/memory/profiles/, spec/memory/candidates/ or data/memory/overrides/."
)
KNOWN_FILES = {"MEMORY.md", "INSIGHTS.md", "HISTORY.md"}
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def read(root: Path, path: str, from_line: int, lines: int, limit: int) -> dict[str, Any]:
    """Lines ``from_line``… of a memory file ``path`` (relative to the workspace ``root``), numbered as the index
    numbers them; only files the index covers, only regular files up to ``limit`` bytes."""
    try:
        target = confine(root, path, suffixes=SUFFIXES)
    except AppError as exc:
        raise AppError(exc.name, exc.message, hint=GET_HINT) from None
    rel = target.relative_to(root).as_posix()
    if file_kind(rel) is None:  # what the index covers, nothing else
        _slip(root, rel, target)
        raise AppError(
            "MEMORY_PATH_TRAVERSAL",
            f"{rel} is not a memory file: only Markdown under memory/ and rule YAML under spec/memory/profiles/, "
            "spec/memory/candidates/ and data/memory/overrides/ can be read",
            hint=GET_HINT,
        )
    try:
        data = read_regular(target, limit)  # never a FIFO (it would block this thread) nor a device
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise AppError(
            "MEMORY_FILE_NOT_FOUND",
            f"Memory file not found: {rel}",
            hint="Use a path search printed, relative to the workspace root (e.g. memory/2026-01-01.md); "
            "`ls memory/` lists the daily files.",
        ) from exc
    except FileTooLarge as exc:
        raise AppError(
            "MEMORY_FILE_REFUSED",
            f"{rel} is {exc.size} bytes; the limit is {exc.limit}",
            hint="Split the file, or raise index_max_file_bytes; larger files are not indexed either.",
        ) from exc
    except NotRegularFile as exc:
        what = _kind(target)
        if what.endswith("a directory"):  # as before: no file of that name
            raise AppError("MEMORY_FILE_NOT_FOUND", f"{rel} is a directory") from exc
        raise AppError("MEMORY_FILE_REFUSED", f"{rel} is {what.replace(': ', ' (')})") from exc
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise AppError("MEMORY_PATH_TRAVERSAL", "Path is too long") from exc
        raise AppError("MEMORY_READ_FAILED", f"Cannot read {rel}: {exc.strerror}") from exc
    text, taken, total = window(data, from_line, lines)
    return {"path": rel, "from_line": from_line, "lines": taken, "total_lines": total, "text": text}


def window(data: bytes, from_line: int, lines: int) -> tuple[str, int, int]:
    """``(text, lines taken, total lines)`` of ``lines`` lines from ``from_line`` (1-based) of a file's bytes,
    numbered as :func:`chunker.split_lines` numbers the decoded text (the index's and editors' numbering), each
    line ending in a newline. Only the window is decoded: a ``get`` of 200 lines from a large file holds the file's
    bytes and its answer, not the whole text and every line (a newline byte never lies inside a UTF-8 sequence,
    so decoding the window is decoding the whole and slicing)."""
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    newlines = data.count(b"\n")
    total = newlines + 1 - (1 if newlines and data.endswith(b"\n") else 0)
    if from_line > total:
        return "", 0, total
    taken = min(lines, total - from_line + 1)
    start = 0
    for _ in range(from_line - 1):
        start = data.find(b"\n", start) + 1
    end = start
    for _ in range(taken):
        newline = data.find(b"\n", end)
        end = len(data) if newline < 0 else newline + 1
    text = data[start:end].decode("utf-8", errors="replace")
    return (text if text.endswith("\n") else text + "\n"), taken, total


def _slip(root: Path, rel: str, target: Path) -> None:
    """``get MEMORY.md``: a memory file named without ``memory/`` is a slip, not an attack — answered with the path
    that was meant (MEMORY_FILE_NOT_FOUND, exit 1) when memory/ holds that file or nothing of that name exists."""
    meant = f"memory/{rel}"
    if file_kind(meant) != "markdown":
        return
    exists = os.path.isfile(root / meant)
    if exists or not os.path.lexists(target):
        raise AppError(
            "MEMORY_FILE_NOT_FOUND",
            f"{rel} is not in memory/: did you mean {meant}?" + ("" if exists else f" ({meant} does not exist either)"),
            hint=f"Memory files are named relative to the workspace root, as search prints them: "
            f"`memoryctl get {meant}`.",
        )


def validate_tree(root: Path, limit: int) -> list[daily.Problem]:  # noqa: C901 (one walk; a branch per problem kind)
    """The problems of a workspace's memory/ tree: layout, unreadable or refused files, daily headings, links."""
    memory = root / "memory"
    problems: list[daily.Problem] = []
    if not memory.is_dir():
        return [daily.Problem("error", "memory/", None, "memory/ is missing: run `memoryctl init` to create it")]
    if memory.is_symlink() and within(root, memory) in (None, root):
        problems.append(daily.Problem("error", "memory/", None, "memory/ is a symlink out of the workspace"))
    for dirpath, dirnames, filenames in os.walk(memory):
        for name in sorted(d for d in dirnames if not d.startswith(".") and not utf8_name(d)):
            rel = shown((Path(dirpath) / name).relative_to(root).as_posix())
            problems.append(daily.Problem("error", rel, None, f"a directory with {NOT_UTF8}"))
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and utf8_name(d))
        for name in sorted(filenames):
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            if name.startswith("."):
                continue
            if not utf8_name(name):
                problems.append(daily.Problem("error", shown(rel), None, NOT_UTF8))
                continue
            refused = refusal(root, full)  # a loop, dangling, or out of the workspace: never followed
            if refused is not None:
                message = _REFUSALS.get(refused, refused)
                problems.append(daily.Problem("error", rel, None, f"{message}: not read, not indexed"))
                continue
            parent = full.parent.relative_to(memory).as_posix()
            if not name.endswith(".md"):
                problems.append(daily.Problem("warning", rel, None, "not a Markdown file: it is not indexed"))
                continue
            in_layout = (parent == "." and (name in KNOWN_FILES or daily.DAILY_NAME.match(name))) or (
                parent == "archive" and daily.DAILY_NAME.match(name)
            )
            if not in_layout:
                problems.append(
                    daily.Problem(
                        "warning",
                        rel,
                        None,
                        "outside the layout (MEMORY.md, INSIGHTS.md, HISTORY.md, YYYY-MM-DD.md, archive/): "
                        "still indexed and searchable",
                    )
                )
            try:
                text = read_regular(full, limit).decode("utf-8")
            except UnicodeDecodeError:
                problems.append(daily.Problem("error", rel, None, "not valid UTF-8"))
                continue
            except FileTooLarge as exc:
                message = f"{exc.size} bytes, over the limit of {exc.limit} (index_max_file_bytes): not indexed"
                problems.append(daily.Problem("error", rel, None, message))
                continue
            except NotRegularFile:
                problems.append(daily.Problem("error", rel, None, f"{_kind(full)}: not read, not indexed"))
                continue
            except FileNotFoundError:  # gone since the walk
                continue
            except OSError as exc:
                problems.append(daily.Problem("error", rel, None, f"unreadable: {exc.strerror}"))
                continue
            problems += daily.check_daily(rel, text)
            problems += _links(root, full, rel, text)
    return problems


def _links(root: Path, full: Path, rel: str, text: str) -> list[daily.Problem]:
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        for target in _LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE) or target.startswith("#"):
                continue
            clean = target.split("#", 1)[0]
            if not clean:
                continue
            resolved = (root / clean.lstrip("/")) if clean.startswith("/") else (full.parent / clean)
            inside = within(root, resolved)
            leaves = inside is None and _resolvable(resolved)  # a loop or too long a name: broken instead
            try:
                broken = not leaves and (inside is None or not inside.exists())
            except OSError:
                broken = True
            if leaves:
                problems.append(daily.Problem("error", rel, number, f"link leaves the workspace: {target}"))
            elif broken:
                problems.append(daily.Problem("warning", rel, number, f"broken link: {target}"))
    return problems


_REFUSALS = {"symlink out of the workspace": "symlink points outside the workspace"}


def _resolvable(path: Path) -> bool:
    try:
        path.resolve()
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop (Python < 3.13)
        return False
    return True


def _kind(full: Path) -> str:
    try:
        return kind_of(full.stat().st_mode)
    except OSError:
        return "not a regular file"
