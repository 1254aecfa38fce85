"""remember's keywords (issue 21 item 4, decision 0012): words in the other language kept visibly as the last line
of the entry's text, so a question in that language finds the entry by its words alone — BM25, no dictionary, no
model — and the hit is the entry's own passage, not a line of keywords."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from memoryd.notes import daily
from memoryd.text import passages
from tests.conftest import Daemon

NOTE = "串口读取在 XR 板上三秒后超时，改为重试三次"
OTHER = "蓝牙配对在安卓 14 上需要定位权限"
QUESTION = "why did the uart reads time out, and what retry did we pick?"


def bm25(daemon: Daemon, ws: str, query: str) -> list[dict[str, object]]:
    hits: list[dict[str, object]] = daemon.call(
        "search", {"workspace": ws, "query": query, "limit": 5, "mode": "bm25"}
    )["hits"]
    return hits


def test_keywords_in_the_other_language_find_the_entry(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    _root, ws = workspace
    daemon.call("remember", {"workspace": ws, "text": OTHER, "keywords": ["bluetooth pairing", "location"]})
    daemon.call("remember", {"workspace": ws, "text": NOTE})
    assert not [h for h in bm25(daemon, ws, QUESTION) if "XR" in str(h["snippet"])]  # its words alone: not found

    written = daemon.call(
        "remember",
        {"workspace": ws, "type": "decision", "text": NOTE, "keywords": ["uart timeout, retry", "串口", "超时"]},
    )
    hits = bm25(daemon, ws, QUESTION)
    assert hits, "an English question finds the Chinese entry by its keywords"
    top = hits[0]
    # the hit is the entry's own passage: its text and its keywords, from the line under the heading
    assert (top["path"], top["start_line"], top["lines"]) == (written["path"], written["start_line"] + 1, 2)
    assert NOTE in str(top["snippet"]) and "**uart**" in str(top["snippet"])
    assert top["item_id"] == written["id"]

    got = daemon.call("get", {"workspace": ws, "path": written["path"], "from_line": written["start_line"], "lines": 3})
    assert got["text"].splitlines()[1:] == [f"- {NOTE}", "  Keywords: uart timeout, retry, 串口, 超时"]
    # and the reverse: a Chinese question finds the English keywords' entry
    assert any("蓝牙" in str(h["snippet"]) for h in bm25(daemon, ws, "bluetooth pairing fails"))


def test_keywords_are_cleaned_and_private_spans_stripped(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    _root, ws = workspace
    keywords = ["UART timeout", "uart  timeout", "<private>secret, token", "hidden</private>", "串口，超时、重试", " "]
    planned = daemon.call("remember", {"workspace": ws, "text": "plain", "keywords": keywords, "dry_run": True})
    assert planned["text"].splitlines()[-1] == "  Keywords: UART timeout, 串口, 超时, 重试"
    written = daemon.call(
        "remember", {"workspace": ws, "text": "plain", "reason": "why", "keywords": ["<private>all of it"]}
    )
    text = (_root / written["path"]).read_text()
    assert "Keywords" not in text and "all of it" not in text  # nothing left: no keywords line at all
    assert text.rstrip("\n").splitlines()[-2:] == ["- plain", "- Reason: why"]


def test_the_keywords_share_the_passage_search_ranks_and_vectors_embed() -> None:
    """Whatever the text (one line, several, a paragraph after a blank line), the keywords line is part of the
    text's last passage, never a passage of its own: search names it with text, and the vector index embeds it so."""
    for text in ("one line", "two\nlines", "- a bullet\n  continued", "first\n\nsecond paragraph", "a\n- sub"):
        entry = daily.plan_entry(
            now=datetime(2026, 3, 1, 10, 0),
            kind="note",
            text=text,
            reason="why",
            followup=None,
            file_exists=True,
            keywords=("uart", "串口"),
        )
        lines = entry.entry.strip("\n").split("\n")
        at = next(n for n, line in enumerate(lines) if "Keywords:" in line)
        holder = [(s, e) for s, e in passages.passage_spans(lines) if s <= at < e]
        assert holder and holder[0][0] < at, (text, lines)  # it holds text lines too


def test_memoryctl_remember_keywords(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, _ws = workspace
    out = daemon.memoryctl(
        "--json", "remember", NOTE, "--keywords", "uart timeout, retry", "--keywords", "串口", cwd=root
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)["data"]
    assert "  Keywords: uart timeout, retry, 串口" in (root / data["path"]).read_text()
    found = daemon.memoryctl("--json", "search", "uart timeout", "--mode", "bm25", cwd=root)
    assert json.loads(found.stdout)["data"]["hits"][0]["item_id"] == data["id"]
