"""What kind of entry a question asks for (memoryd/text/intent.py)."""

from __future__ import annotations

import pytest

from memoryd.text.intent import asks_for, entry_kind


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("what did we decide about the CDN on 2026-02-24?", "decision"),
        ("What did we agree on for the mobile release on Jan 8?", "decision"),
        ("上周关于推荐模型做了什么决定？", "decision"),
        ("What broke in production last Tuesday?", "event"),
        ("1月20日值班时发生了什么？", "event"),
        ("昨天的发布出了什么问题？", "event"),
        ("how do we rotate the TLS certificate?", None),
        ("串口超时怎么处理", None),
        ("what happened after we decided to move the CDN?", None),  # both: no preference
        ("x" * 3000 + " what did we decide", None),  # past the characters looked at
    ],
)
def test_asks_for(question: str, kind: str | None) -> None:
    assert asks_for(question) == kind


def test_entry_kind() -> None:
    assert entry_kind("## 2026-02-24 10:15 — decision") == "decision"
    assert entry_kind("## 2026-03-05 17:30 — event") == "event"
    assert entry_kind("## 2026-03-05") is None
    assert entry_kind("## Decisions about the CDN") is None
