"""Does a prompt ask about the past? The small classifier that decides whether ``context`` adds recent daily notes.

Patterns, not a keyword list: an English word matches on word boundaries (``previous_page`` is an identifier, not
"previous"), and ambiguous words count only in the phrases that make them temporal — "earlier" as an adverb of time
("earlier today", "as I said earlier") but not before a noun ("earlier versions") or in "earlier than", "previous" only before session, conversation, discussion, time…, "past" only in "in
the past" or "the past few days" (never "past tense"), "remember" as a question ("do you remember") and not as an
instruction ("remember to close it"). Chinese has no word boundaries: unambiguous words (昨天, 上周, 上次, 刚才…)
count anywhere, ambiguous ones (之前, 以前, 记得, 过去) only in the constructions that point back at a
conversation or a decision (我们之前, 之前的讨论, 还记得, 过去几天) and never in "在 … 之前" (before something in
the code).

The labelled prompts are tests/context_prompts.py, measured in tests/test_context.py; decision 0007 records them.
Pure functions, no I/O.
"""

from __future__ import annotations

import re

# Words of time that point back from now. English is matched case-insensitively with word boundaries.
_EN_POSITIVE = [
    r"\byesterday(?:'s)?\b",
    r"\b(?:last|this past) (?:time|week|month|session|night|sprint|meeting|call|chat|conversation|run|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|weekend)\b",
    r"\bthe other day\b",
    r"\b(?:a few|couple of|\d+|two|three|several) (?:days|weeks|sessions|hours) ago\b",
    r"\b(?:a )?(?:day|week|month) ago\b",
    r"\b(?:days|weeks|months) ago\b",
    # "earlier" as an adverb of time (earlier today, as I said earlier, earlier we…), not an adjective before a
    # noun (earlier versions, earlier timestamps) nor a comparison (earlier than)
    r"\bearlier (?:today|this (?:morning|afternoon|week|month)|in (?:this|the) (?:session|conversation|chat))\b",
    r"\b(?:said|discussed|mentioned|decided|agreed|did|tried|saw|changed|fixed|wrote|asked|noted|talked about)"
    r"\b[^.?!\n]{0,40}\bearlier\b",
    r"(?:^|[.?!]\s*)earlier,?\s+(?:we|you|i|the)\b",
    r"\bpreviously\b",
    r"\b(?:previous|prior|last) (?:session|sessions|conversation|conversations|discussion|discussions|chat|"
    r"attempt|decision|decisions|run|meeting|time|investigation|debugging session)\b",
    r"\bin the past\b",
    r"\b(?:the |over the |in the )?past (?:few |couple of |two |three |\d+ )?(?:days|weeks|sessions|months)\b",
    r"\bwhat did (?:we|you|i) (?:decide|agree|choose|pick|settle|conclude|say|do|find|try|change|use|learn)\b",
    r"\b(?:did|have|had) we (?:already |ever |previously |once )?(?:decide|agree|discuss|talk|settle|choose|"
    r"try|fix|see|hit|use|change|look)",
    r"\bwe (?:decided|agreed|discussed|talked about|settled on|concluded|chose|tried|fixed|said)\b",
    r"\bas (?:we|i|you) (?:discussed|said|mentioned|agreed|decided|noted)\b",
    r"\b(?:do|don't|can|could|would) you (?:still )?(?:remember|recall)\b",
    r"\bremember (?:when|what we|how we|why we|where we|that we|the (?:decision|discussion|bug|issue|fix))\b",
    r"\b(?:recap|remind me)\b",
    r"\bwhere (?:did )?we (?:left|leave) off\b",
    r"\b(?:we|you|i)\b[^.?!\n]{0,60}\bbefore\s*\?",  # "have we seen this error before?"
    r"\blast (?:we|i|you) (?:talked|spoke|met|worked)\b",
    r"\bhistory of (?:this|the|our) (?:decision|discussion|bug|issue)\b",
]

_ZH_POSITIVE = [
    r"昨天|昨日|前天|上周|上星期|上礼拜|上个月|上月|上次|上回|上一次|上一回|刚才|刚刚|前几天|前两天|那天|早些时候|先前",
    r"(?:几|两|三|四|五|一)(?:天|周|个星期|星期|个月)(?:之|以)?前",  # 三天前, 两周以前
    r"(?:我们|咱们|你|我)(?:之前|以前|当时|那时|上次)",
    r"(?:之前|以前|当时)(?:我们|咱们|你|我|说|讨论|提到|决定|商量|聊|定|约定|确定|做|改|试)",
    r"(?:之前|以前|上次|当时)的(?:讨论|决定|结论|方案|会话|对话|问题|思路|做法|约定|修复|bug|记录|进展)",
    r"(?:还|你|您|是否)记得",
    r"过去(?:几|两|三|一|这)?(?:天|周|个星期|星期|个月|段时间)",
    r"(?:决定|讨论|说|约定|商量|聊|定)过(?:什么|啥|哪|吗|没)",
    r"(?:回顾|复盘|总结)(?:一下)?(?:之前|上次|最近|昨天|上周|过去)",
    r"上一(?:个|次)?(?:会话|对话|讨论|版本的决定)",
]

# What looks like the past and is not: checked first, in both languages; a prompt with one of these counts only
# when some other, unambiguous pattern matches outside it.
_NEGATIVE = [
    r"\bpast (?:tense|participle|simple|perfect)\b",
    r"\bthe past\b(?=\s+(?:tense|participle|form))",
    r"过去(?:式|时|分词|完成时)",
    r"在[^，。？！,.?!\s]{1,16}(?:之前|以前)",  # 在循环之前 (before the loop): order in code, not time
    r"记得(?:要|把|关|加|写|改|检查|提交|保存|测试|运行)",  # "remember to …": an instruction
]

_POSITIVE = re.compile("|".join(f"(?:{p})" for p in _EN_POSITIVE + _ZH_POSITIVE), re.IGNORECASE)
_NEGATIVES = re.compile("|".join(f"(?:{p})" for p in _NEGATIVE), re.IGNORECASE)
MAX_CHARS = 4000  # a pasted log: the question is at its start or end; look at both


def asks_about_past(text: str | None) -> bool:
    """True when ``text`` asks about earlier sessions, decisions or days (yesterday, 上周, what did we decide…)."""
    if not text:
        return False
    if len(text) > MAX_CHARS:
        half = MAX_CHARS // 2
        text = f"{text[:half]}\n{text[-half:]}"
    masked = _NEGATIVES.sub(lambda m: " " * len(m.group(0)), text)
    return _POSITIVE.search(masked) is not None
