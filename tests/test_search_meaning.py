"""Search that finds meaning, through the real daemon with what `make run` installs (the bundled model and the
dictionary on): dates in a question as a window on entry dates, the agent's own other phrasing (`also`), a
calibrated relevance on every hit, and recall that injects nothing for an unrelated prompt."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from memoryctl.rpc import RemoteError

from tests.conftest import Daemon, short_tmp
from tests.test_semantic import embedded, start

DAYS = {
    "memory/2026-02-24.md": (
        "## 2026-02-24\n\n## 2026-02-24 09:45 — summary\n- Standup: CDN vendor decision today, then the canary change.\n\n"
        "## 2026-02-24 10:00 — decision\n- CDN: move static assets from CloudFront to Fastly\n"
    ),
    "memory/2026-02-10.md": "## 2026-02-10\n\n## 2026-02-10 09:00 — decision\n- CDN: keep CloudFront for the EU region\n",
    "memory/2026-01-24.md": "## 2026-01-24\n\n## 2026-01-24 11:00 — note\n- The 24 h cache TTL on the CDN is too long\n",
    "memory/2026-03-05.md": (
        "## 2026-03-05\n\n## 2026-03-05 17:30 — event\n- 3.5 版的 web 发布：新的价格组件在 Safari 15 上白屏，回滚后修复再发\n"
    ),
    "memory/2026-02-02.md": "## 2026-02-02\n\n## 2026-02-02 16:00 — event\n- iOS 发布流程：分阶段放量七天\n",
    "memory/2026-02-03.md": (
        "## 2026-02-03\n\n## 2026-02-03 14:00 — decision\n"
        "- Enterprise customers can pay by bank transfer against an invoice; cards stay optional\n"
    ),
    "memory/2026-02-04.md": "## 2026-02-04\n\n## 2026-02-04 10:00 — note\n- Per user, at most 3 password resets per day\n",
}


@pytest.fixture
def team(started: list[Daemon], home: Path) -> tuple[Daemon, str]:
    d = start(started, home)
    root = short_tmp("ws")
    for rel, text in DAYS.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    ws: str = d.call("workspace.add", {"path": str(root)})["workspace_id"]
    d.call("index", {"workspace": ws})
    embedded(d, ws, total=sum(text.count(" — ") for text in DAYS.values()))  # one passage an entry
    return d, ws


def hits(d: Daemon, ws: str, query: str, **params: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = d.call("search", {"workspace": ws, "query": query, **params})["hits"]
    return found


def test_a_date_in_the_question_is_a_window_not_words(team: tuple[Daemon, str]) -> None:
    d, ws = team
    # "24" must not pull up the other note's "24 h": the 2026-02-24 entry answers
    assert hits(d, ws, "what did we decide about the CDN on 2026-02-24?")[0]["path"] == "memory/2026-02-24.md"
    assert hits(d, ws, "what did we decide about the CDN on Feb 10?", now="2026-03-06")[0]["path"] == (
        "memory/2026-02-10.md"
    )
    assert hits(d, ws, "昨天的发布出了什么问题？", now="2026-03-06")[0]["path"] == "memory/2026-03-05.md"
    # the caller's own window, in any mode
    for mode in ("bm25", "vector", "hybrid"):
        found = hits(d, ws, "CDN", since="2026-02-01", until="2026-02-28", mode=mode)
        assert found[0]["path"] in ("memory/2026-02-24.md", "memory/2026-02-10.md"), (mode, found[0])
    with pytest.raises(RemoteError) as info:
        d.call("search", {"workspace": ws, "query": "x", "since": "2026-02-31"})
    assert info.value.name == "INVALID_PARAMS"


def test_a_question_about_a_decision_prefers_decision_entries(team: tuple[Daemon, str]) -> None:
    """The standup line that mentions the CDN decision loses to the decision entry itself when the question asks
    what was decided (text/intent.py); the same in Chinese; a question that asks for no kind keeps the order."""
    d, ws = team
    for question in ("what did we decide about the CDN on 2026-02-24?", "2026-02-24 关于 CDN 做了什么决定？"):
        assert "Fastly" in hits(d, ws, question)[0]["snippet"], question


def test_the_agents_other_phrasing_is_fused_in(team: tuple[Daemon, str]) -> None:
    """A question in other words that the notes' words do not match: its phrasing in the note's language finds it,
    fused into the one ranking (the MCP tool asks the agent for an English and a Chinese phrasing)."""
    d, ws = team
    alone = hits(d, ws, "企业客户不用信用卡怎么付款", mode="bm25")
    assert not any("bank transfer" in h["snippet"] for h in alone)
    fused = hits(d, ws, "企业客户不用信用卡怎么付款", also=["how do enterprise customers pay without a card"])
    assert "bank transfer" in fused[0]["snippet"]


def test_memoryctl_search_takes_a_window_and_other_phrasings(team: tuple[Daemon, str]) -> None:
    """The same through `memoryctl search`: --since/--until pick the window, --also adds the other phrasing."""
    d, ws = team

    def found(*args: str) -> list[dict[str, Any]]:
        out = d.memoryctl("--json", "-w", ws, "search", *args)
        assert out.returncode == 0, out.stderr
        hits: list[dict[str, Any]] = json.loads(out.stdout)["data"]["hits"]
        return hits

    def first(*args: str) -> dict[str, Any]:
        return found(*args)[0]

    assert first("CDN decision", "--since", "2026-02-20", "--until", "2026-02-28")["path"] == "memory/2026-02-24.md"
    assert first("CDN decision", "--since", "2026-02-05", "--until", "2026-02-12")["path"] == "memory/2026-02-10.md"
    assert not any("bank transfer" in h["snippet"] for h in found("企业客户不用信用卡怎么付款", "--mode", "bm25"))
    fused = first("企业客户不用信用卡怎么付款", "--also", "how do enterprise customers pay without a card")
    assert "bank transfer" in fused["snippet"]
    bad = d.memoryctl("-w", ws, "search", "x", "--since", "2026-02-31")
    assert bad.returncode == 2 and "iso_day" in bad.stderr


def test_hits_carry_a_calibrated_relevance_and_recall_injects_only_what_answers(team: tuple[Daemon, str]) -> None:
    d, ws = team
    for mode in ("bm25", "vector", "hybrid"):
        found = hits(d, ws, "CDN CloudFront Fastly", mode=mode)
        assert all(0.0 <= h["relevance"] <= 1.0 for h in found) and found[0]["relevance"] > 0.5, (mode, found)
    for prompt in ("Write a haiku about cats.", "写一首关于猫的俳句", "run the tests and fix the failing one"):
        dynamic = d.call("context", {"workspace": ws, "query_text": prompt})["dynamic"]
        assert dynamic["items"] == [], (prompt, dynamic["items"])
    dynamic = d.call("context", {"workspace": ws, "query_text": "how do enterprise customers pay by bank transfer?"})
    assert [i["path"] for i in dynamic["dynamic"]["items"]][:1] == ["memory/2026-02-03.md"]
