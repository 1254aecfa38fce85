"""The write path of remember through the real daemon: forged structure, private spans, appends that cost the
same on a large daily file, concurrent writers grouped into one write, and index rows equal to a rebuild's."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import apsw
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from memoryctl.rpc import RemoteError

from memoryd.notes import daily
from memoryd.text import chunker
from tests.conftest import Daemon, daemon_env, short_tmp, wait_for


def _chunks(text: str) -> list[chunker.Chunk]:
    lines = chunker.split_lines(text)
    return [chunker.Chunk(lo + 1, hi, h, "\n".join(lines[lo:hi])) for lo, hi, h in chunker.chunk_spans(lines)]


# Each spelling wraps the word SECRET; what follows the closing tag must stay.
PRIVATE_SPELLINGS = [
    ("<private>", "</private>"),
    ("<PRIVATE>", "</PRIVATE>"),
    ("<Private>", "</pRiVaTe>"),
    ("< private >", "</private>"),
    ("<private >", "</private >"),
    ("<private\n>", "</private\n>"),
    ("<private>", "</ private>"),
    ("<private>", "< / private >"),
    ('<private class="x">', "</private>"),
    ("<private\tnote='a b'>", "</private>"),
    ("<private><private>inner</private>", "</private>"),  # nested: the outer span runs to its own end
    ("\uff1cprivate\uff1e", "\uff1c/private\uff1e"),  # full-width brackets
    ("<private/>", "</private>"),
]
UNCLOSED = ["<private>", "< PRIVATE >", '<private id="1">', "<private\n>", "\uff1cprivate\uff1e"]


def today_file(ws_path: Path) -> Path:
    return ws_path / "memory" / f"{datetime.now().astimezone():%Y-%m-%d}.md"


@pytest.mark.parametrize("field", ["text", "reason", "followup"])
def test_private_spans_in_any_spelling_are_never_stored(
    daemon: Daemon, workspace: tuple[Path, str], field: str
) -> None:
    path, ws = workspace
    for n, (opening, closing) in enumerate(PRIVATE_SPELLINGS):
        value = f"kept{n}a {opening}SECRET{n} 机密{closing} kept{n}b"
        params = {"workspace": ws, "text": f"entry {n}", field: value}
        daemon.call("remember", params)
        stored = today_file(path).read_text()
        assert f"SECRET{n}" not in stored and "机密" not in stored, (opening, closing)
        assert f"kept{n}a" in stored and f"kept{n}b" in stored, (opening, closing)
        assert "private" not in stored.lower() and "\uff1c" not in stored
    for n, opening in enumerate(UNCLOSED):
        daemon.call("remember", {"workspace": ws, "text": f"open{n} ok", field: f"lead{n} {opening}TAIL{n}\nmore"})
        stored = today_file(path).read_text()
        assert f"lead{n}" in stored and f"TAIL{n}" not in stored and "\nmore" not in stored.split(f"lead{n}")[1]


def test_private_spans_in_any_spelling_are_never_observed(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    path, ws = workspace
    for n, (opening, closing) in enumerate(PRIVATE_SPELLINGS):
        daemon.call(
            "observe",
            {"workspace": ws, "kind": "log", "source": "pytest", "text": f"seen{n} {opening}SECRET{n}{closing} end"},
        )
    stored = (path / "data/memory/observations.jsonl").read_text()
    records = [json.loads(line) for line in stored.splitlines()]
    assert [r["text"] for r in records] == [f"seen{n}  end" for n in range(len(PRIVATE_SPELLINGS))]
    assert "SECRET" not in stored


def test_lookalike_tags_are_text() -> None:
    for text in ["<privately>x</privately>", "<privacy>", "a < private b", "private>", "<pri vate>x"]:
        assert daily.strip_private(text) == text


# Lines Markdown would read as a heading, a fence or a setext underline (each also after up to three spaces).
FORGED = [
    "## 2020-01-01 00:00 — decision",
    "# top",
    "### three",
    "###### six",
    "##",
    "## ",
    "##\tTab",
    " ## one space",
    "  ## two spaces",
    "   ## three spaces",
    "\t## tab",
    "```",
    "```python",
    "~~~",
    "~~~~ tilde",
    "   ```",
    "---",
    "===",
    "=",
    "-",
    "- ## in a bullet",
    "## 2020-01-01 — 中文标题",
]


def _structure(text: str) -> list[str]:
    """Headings the chunker finds, and lines a CommonMark reader would take as structure inside our bullets."""
    headings = [chunk.heading for chunk in _chunks(text) if chunk.heading]
    suspicious = []
    for line in text.splitlines():
        body = line[2:] if line.startswith(("- ", "  ")) else line
        if line.startswith("## "):
            continue  # ours, checked by validate
        indent = len(body) - len(body.lstrip(" \t"))
        stripped = body.lstrip(" \t")
        if len(body[:indent].expandtabs(4)) < 4 and re.match(r"#{1,6}(?:[ \t]|$)|`{3}|~{3}|[=-]+\s*$", stripped):
            suspicious.append(line)
        if line.startswith("- ") and re.match(r"#{1,6}(?:[ \t]|$)|`{3}|~{3}", stripped):
            suspicious.append(line)
    return headings + suspicious


@pytest.mark.parametrize("position", ["first", "continuation", "reason"])
def test_forged_structure_is_stored_as_text(daemon: Daemon, workspace: tuple[Path, str], position: str) -> None:
    path, ws = workspace
    for n, forged in enumerate(FORGED):
        if position == "first":
            params = {"text": f"{forged} word{n}x\nafter{n}"}
        elif position == "continuation":
            params = {"text": f"intro{n}\n{forged} word{n}x\nafter{n}"}
        else:
            params = {"text": f"intro{n}", "reason": f"why{n}\n{forged} word{n}x\nafter{n}"}
        daemon.call("remember", {"workspace": ws, **params})
    text = today_file(path).read_text()
    headings = [c.heading for c in _chunks(text) if c.heading]
    assert len(headings) == len(FORGED) + 1
    assert all(daily.ENTRY_HEADING.match(h) or daily.DAY_HEADING.match(h) for h in headings), headings
    assert [line for line in _structure(text) if not line.startswith("## ")] == []
    problems = daemon.call("validate", {"workspace": ws})["reports"][0]["problems"]
    assert [p for p in problems if p["path"].endswith(today_file(path).name)] == []
    for n in range(len(FORGED)):  # still searchable by its words, under the entry's own heading
        hits = daemon.call("search", {"workspace": ws, "query": f"word{n}x"})["hits"]
        assert hits and all(daily.ENTRY_HEADING.match(h["heading"]) for h in hits), (n, hits)


def test_escaping_keeps_the_text_readable() -> None:
    planned = daily.plan_entry(
        now=datetime(2026, 1, 2, 3, 4).astimezone(),
        kind="note",
        text="first\n## not a heading\n```\ncode",
        reason=None,
        followup=None,
        file_exists=True,
    )
    assert "\n  \\## not a heading\n  \\```\n  code\n" in planned.entry


# --- appends: the index rows after remembers are the rows a rebuild makes ----------------------------------------

LINES = ["word", "中文 串口超时", "", "   ", "## forged", "```", "~~~ x", "---", "- item", "  indented", "#tag", "a\tb"]


def _rows(db: Path, rel: str) -> tuple[Any, ...]:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        doc = conn.execute("SELECT mtime_ns, size, sha256 FROM documents WHERE path = ?", (rel,)).fetchone()
        chunks = conn.execute(
            "SELECT c.start_line, c.end_line, c.heading, c.text, c.text_digest, c.text_length FROM chunks c "
            "JOIN documents d USING (doc_id) WHERE d.path = ? ORDER BY c.start_line",
            (rel,),
        ).fetchall()
        vocab = conn.execute("SELECT term, doc, cnt FROM chunks_vocab ORDER BY term").fetchall()
    finally:
        conn.close()
    return doc, chunks, vocab


def _prefix(day: str, kind: str, body_lines: int, blank_tail: int, newline: bool, crlf: bool) -> str | None:
    if kind == "none":
        return None
    if kind == "preamble":
        text = "\n".join(f"plain {i}" for i in range(body_lines))
    else:
        text = f"## {day}\n\n## {day} 09:00 — note\n" + "\n".join(f"- line {i}" for i in range(body_lines))
        if kind == "fence":
            text += "\n```\nopen fence"
    text += "\n" * blank_tail + ("\n" if newline else "")
    return text.replace("\n", "\r\n") if crlf else text


@pytest.fixture(scope="module")
def small_chunks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """One daemon for the examples, with 6-line chunk windows so that appends cross window boundaries."""
    home = short_tmp("home")
    daemon = Daemon(home, daemon_env(home))
    daemon.env["MEMORYD_CHUNK_MAX_LINES"] = "6"
    daemon.start()
    yield daemon
    daemon.stop(signal.SIGTERM)
    shutil.rmtree(home, ignore_errors=True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    prefix=st.tuples(
        st.sampled_from(["none", "entries", "preamble", "fence"]),
        st.integers(0, 9),
        st.integers(0, 3),
        st.booleans(),
        st.booleans(),
    ),
    entries=st.lists(
        st.tuples(
            st.lists(st.sampled_from(LINES), min_size=1, max_size=9),
            st.lists(st.sampled_from(LINES), max_size=3),
            st.booleans(),
        ),
        min_size=1,
        max_size=6,
    ),
)
def test_index_rows_after_remembers_are_a_rebuilds(
    small_chunks: Daemon, prefix: tuple[str, int, int, bool, bool], entries: list[Any]
) -> None:
    daemon = small_chunks
    path = short_tmp("ws")
    try:
        ws = daemon.call("workspace.add", {"path": str(path)})["workspace_id"]
        target = today_file(path)
        rel = f"memory/{target.name}"
        text = _prefix(target.stem, *prefix)
        if text is not None:
            target.parent.mkdir(exist_ok=True)
            target.write_bytes(text.encode())
        for lines, reason, together in entries:
            body = "\n".join(lines)
            if not body.strip():
                body = "filler"
            params = {"workspace": ws, "text": body, "reason": "\n".join(reason) or None}
            if together:  # concurrent: written as one batch when they meet
                threads = [threading.Thread(target=daemon.call, args=("remember", params)) for _ in range(3)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            else:
                daemon.call("remember", params)
        db = daemon.home / "state" / "workspaces" / ws / "index.sqlite"
        appended = _rows(db, rel)
        data = target.read_bytes()
        info = target.stat()
        assert appended[0] == (info.st_mtime_ns, info.st_size, hashlib.sha256(data).hexdigest())
        daemon.call("index", {"workspace": ws, "full": True})
        assert appended == _rows(db, rel)
    finally:
        daemon.call("workspace.remove", {"workspace": ws, "owner_token": daemon.owner_token()})
        shutil.rmtree(path, ignore_errors=True)


def test_appends_are_indexed_by_section(small_chunks: Daemon) -> None:
    # the equivalence above matters because appends to a file this daemon wrote last are indexed by section
    path = short_tmp("ws")
    ws = small_chunks.call("workspace.add", {"path": str(path)})["workspace_id"]
    for n in range(3):
        small_chunks.call("remember", {"workspace": ws, "text": f"sectioned {n}"})
    wait_for(lambda: '"indexed":"section"' in small_chunks.log.read_text(), timeout=20)
    hits = small_chunks.call("search", {"workspace": ws, "query": "sectioned"})["hits"]
    assert len(hits) == 3
    shutil.rmtree(path, ignore_errors=True)


# --- appends: the file is appended to, never rewritten ------------------------------------------------------------


def _get(daemon: Daemon, ws: str, answer: dict[str, Any]) -> str:
    params = {"workspace": ws, "path": answer["path"], "from_line": answer["start_line"], "lines": answer["lines"]}
    text: str = daemon.call("get", params)["text"]
    return text


def test_remember_appends_in_place(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    path, ws = workspace
    first = daemon.call("remember", {"workspace": ws, "text": "first entry"})
    target = today_file(path)
    inode = target.stat().st_ino
    with open(target, "rb") as reader:  # a reader holding the file open sees the appends (a rename would hide them)
        before = reader.read()
        second = daemon.call("remember", {"workspace": ws, "text": "second entry"})
        assert target.stat().st_ino == inode
        assert before + reader.read() == target.read_bytes()
    assert _get(daemon, ws, first).endswith("- first entry\n")
    assert _get(daemon, ws, second).endswith("- second entry\n")


@pytest.mark.parametrize(
    "edit",
    [
        "\nedited by hand\n",
        "no newline at the end",
        "\r\ncrlf line\r\n",
        "\r",
        "\n```\nan open fence\n",
        "\n- torn entr",  # what a crash mid-append leaves
    ],
)
def test_a_file_changed_between_remembers_is_read_again(daemon: Daemon, workspace: tuple[Path, str], edit: str) -> None:
    path, ws = workspace
    first = daemon.call("remember", {"workspace": ws, "text": "before the edit"})
    target = today_file(path)
    with open(target, "ab") as f:
        f.write(edit.encode())
    edited = target.read_bytes()
    answers = [daemon.call("remember", {"workspace": ws, "text": f"after the edit {n} 编辑"}) for n in range(3)]
    data = target.read_bytes()
    assert data.startswith(edited)  # nothing before was lost or rewritten
    assert _get(daemon, ws, first).endswith("- before the edit\n")
    lines = chunker.split_lines(data.decode())
    for n, answer in enumerate(answers):
        assert lines[answer["start_line"] - 1] == answer["heading"]
        assert lines[answer["start_line"]] == f"- after the edit {n} 编辑"
    hits = daemon.call("search", {"workspace": ws, "query": "编辑"})["hits"]
    assert hits  # inside the open fence too: fenced lines are text
    db = daemon.home / "state" / "workspaces" / ws / "index.sqlite"
    indexed = _rows(db, f"memory/{target.name}")
    daemon.call("index", {"workspace": ws, "full": True})
    assert indexed == _rows(db, f"memory/{target.name}")


def test_concurrent_remembers_all_land_once_with_their_own_lines(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    path, ws = workspace
    answers: list[dict[str, Any]] = []
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(15):
                answers.append(daemon.call("remember", {"workspace": ws, "text": f"w{n} e{i}\nline two {n}-{i}"}))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    lines = chunker.split_lines(today_file(path).read_text())
    assert len({a["id"] for a in answers}) == len(answers) == 120
    seen = set()
    for answer in answers:
        body = lines[answer["start_line"]]
        assert lines[answer["start_line"] - 1] == answer["heading"] and body not in seen
        seen.add(body)
    assert sum(1 for line in lines if re.fullmatch(r"- w\d+ e\d+", line)) == 120


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_daily_path_that_is_not_a_file_is_refused(daemon: Daemon, workspace: tuple[Path, str], kind: str) -> None:
    path, ws = workspace
    target = today_file(path)
    target.parent.mkdir(exist_ok=True)
    if kind == "fifo":
        os.mkfifo(target)  # reading it would wait for a writer forever
    else:
        target.mkdir()
    for dry_run in (True, False):
        with pytest.raises(RemoteError) as info:
            daemon.call("remember", {"workspace": ws, "text": "not into a fifo", "dry_run": dry_run})
        assert info.value.name == "MEMORY_FILE_REFUSED"
    assert daemon.call("ping") is not None


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "<private>",
                "</private>",
                "< PRIVATE >",
                "</ private>",
                "<pri",
                "vate>",
                "<",
                ">",
                "/",
                "private",
                "\uff1c",
                "\uff1e",
                "secret",
                "中文",
                " ",
                "\n",
                '<private a="1">',
            ]
        ),
        max_size=14,
    ).map("".join)
)
@example("<pri<private>x</private>vate>secret")  # removing the span glues a new tag together
@example("<<private>x</private>private>a</private>b")
def test_stripped_text_holds_no_private_tag(text: str) -> None:
    stripped = daily.strip_private(text)
    assert daily._PRIVATE_TAG.search(stripped) is None
    assert daily.strip_private(stripped) == stripped
