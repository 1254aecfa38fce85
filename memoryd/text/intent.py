"""What kind of entry a question asks for: a decision ("what did we decide…", "决定了什么") or an event ("what broke…",
"发生了什么"). ``remember`` writes each entry under a typed heading (``## 2026-02-24 10:15 — decision``); a question
about a decision then prefers decision entries over a note or a standup summary that mentions the same topic
(decision 0011, "entry kinds"). Pure functions over text; no kind asked, no preference.
"""

from __future__ import annotations

import re

_ASKS = {
    "decision": re.compile(
        r"\b(?:decid\w*|decision\w*|agree\w*|settled on|chose|choose|chosen|opted)\b"
        r"|决定|决策|定了|选定|约定|商定|拍板|达成.{0,4}一致",
        re.IGNORECASE,
    ),
    "event": re.compile(
        r"\b(?:happen\w*|broke|broken|went wrong|incident\w*|outage\w*|crash\w*)\b"
        r"|发生|出了什么问题|出问题|出了问题|故障|事故|宕机|挂了",
        re.IGNORECASE,
    ),
}
_KIND = re.compile(r"\s[—-]\s*(decision|event|summary|note)\s*$")
MAX_QUESTION = 2_000  # characters looked at, as for dates: a pasted document is not a question


def asks_for(question: str) -> str | None:
    """``decision`` or ``event`` when the question asks for that kind of entry (only one: both, neither)."""
    text = question[:MAX_QUESTION]
    kinds = [kind for kind, pattern in _ASKS.items() if pattern.search(text)]
    return kinds[0] if len(kinds) == 1 else None


def entry_kind(heading: str) -> str | None:
    """The kind in an entry's heading (``## 2026-02-24 10:15 — decision`` → ``decision``), or None."""
    found = _KIND.search(heading)
    return found.group(1) if found else None
