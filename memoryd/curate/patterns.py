"""What sanitize looks for in a line: secrets (API keys, tokens, JWTs, private key blocks, ``password=`` style
assignments), lines that hold only a date or only a URL, and the key of a ``key: value`` bullet.

Every pattern runs in time linear in the line (a 10 MB line from a hostile update included): quantifiers are
bounded or possessive, and an unbounded one starts only where a run of its characters starts (a lookbehind), so no
position is scanned twice. Pure functions, no I/O.
"""

from __future__ import annotations

import re

# Characters of a key/token run; a secret must start where such a run starts.
_RUN = r"A-Za-z0-9_\-"
_VALUE = r"[^\s\"'`,;，；]"
# (what a text must hold, in lower case, for the pattern to be worth running; the pattern)
_SECRETS: list[tuple[tuple[str, ...], str]] = [
    # OpenAI (sk-…, sk-proj-…) and Anthropic (sk-ant-…) API keys
    (("sk-",), rf"(?<![{_RUN}])sk-(?:ant-|proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{{20}}"),
    # GitHub tokens: personal (ghp_), OAuth (gho_), user/server/refresh (ghu_, ghs_, ghr_), fine-grained PATs
    (("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), rf"(?<![{_RUN}])gh[pousr]_[A-Za-z0-9]{{30}}"),
    (("github_pat_",), rf"(?<![{_RUN}])github_pat_[A-Za-z0-9_]{{30}}"),
    # AWS access key ids
    (
        ("akia", "asia", "agpa", "aida", "aroa", "anpa", "anva", "aipa"),
        r"(?<![A-Za-z0-9])(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}(?![A-Za-z0-9])",
    ),
    # Slack tokens (xoxb-, xoxp-, xoxa-, xoxo-, xoxs-, xoxr-)
    (("xox",), rf"(?<![{_RUN}])xox[abposr]-[A-Za-z0-9\-]{{10}}"),
    # Google API keys
    (("aiza",), rf"(?<![{_RUN}])AIza[0-9A-Za-z_\-]{{35}}"),
    # JSON Web Tokens: three base64url parts, the header's JSON starting {"
    (("eyj",), rf"(?<![{_RUN}])eyJ[{_RUN}]{{8,}}+\.[{_RUN}]{{8,}}+\.[{_RUN}]{{8}}"),
    # PEM private keys (RSA, EC, DSA, OPENSSH, ENCRYPTED, PGP … BLOCK)
    (("-----begin",), r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"),
    # password=…, token: …, api_key = "…", 密码：… with a long value that is not a placeholder ($ENV, <…>, {…}, ***):
    # 8+ characters with a digit or a symbol in them, or 16+ ("password: required" is not a secret)
    (
        ("pass", "pwd", "secret", "token", "key", "密码", "口令", "令牌", "密钥", "秘钥"),
        r"(?i:(?<![A-Za-z0-9])(?:password|passwd|passphrase|pwd|secret|client[_\-]?secret|(?:access|auth|refresh|"
        r"bearer|api|session)?[_\-]?token|api[_\-]?key|apikey|access[_\-]?key|secret[_\-]?key|private[_\-]?key|"
        r"密码|口令|令牌|密钥|秘钥)[\"']?[ \t]{0,3}(?:[:=：]|=>)[ \t]{0,3}[\"']?)"
        rf"(?![$<{{%*\[(]|x{{4}}|X{{4}}|\.{{3}}|…)(?:(?={_VALUE}{{0,63}}[0-9!@#%^&+/=]){_VALUE}{{8}}|{_VALUE}{{16}})",
    ),
]
_CHECKS = [(frozenset(hints), re.compile(pattern)) for hints, pattern in _SECRETS]
_HINT = re.compile("|".join(re.escape(h) for hints, _ in _SECRETS for h in hints))  # run on the lower-cased text
KEY_BEGIN = re.compile(r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
KEY_END = re.compile(r"-----END[A-Z0-9 ]{0,40}-----")
# How far either side of a line break a secret split over two lines is looked for.
SPLIT_WINDOW = 2048
# Date-only and URL-only are judged on short lines only (a longer line says more than a date or a link).
SHORT = 2048

_MONTH = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?"
_DATE = (
    r"(?:\d{4}[-/.]\d{1,2}[-/.]\d{1,2}|\d{4}年\d{1,2}月(?:\d{1,2}[日号])?|\d{1,2}月\d{1,2}[日号]|"
    r"\d{1,2}/\d{1,2}/\d{2,4}|" + _MONTH + r"\s\d{1,2}(?:st|nd|rd|th)?,?\s\d{4}|\d{1,2}\s" + _MONTH + r"\s\d{4})"
)
_TIME = r"(?:\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:\s?[ap]\.?m\.?)?|(?:上午|下午|晚上)?\d{1,2}[点时](?:\d{1,2}分)?)"
_WEEKDAY = (
    r"(?:(?:mon|tue|tues|wed|wednes|thu|thur|thurs|fri|sat|satur|sun)(?:day)?\.?|(?:星期|周|礼拜)[一二三四五六日天])"
)
_ZONE = r"(?:z|utc|gmt|[+-]\d{2}:?\d{2})"
_DATE_LABEL = (
    r"(?:(?:date|day|updated|last updated|as of|created|time|日期|更新|更新时间|更新于|时间|截至)\s?[:：]?\s?)?"
)
_DATE_ONLY = re.compile(
    rf"{_DATE_LABEL}(?:{_WEEKDAY}[,，]?\s?)?(?:{_DATE}|{_TIME})(?:[T\s,，]{{0,3}}(?:{_WEEKDAY}|{_TIME}|{_ZONE}))*",
    re.IGNORECASE,
)
_URL = r"(?:(?:https?|ftp|file)://|www\.)[^\s<>()\[\]]+"
_URL_ONLY = re.compile(
    rf"(?:(?:link|url|source|see|ref|reference|链接|网址|参考|来源|地址)\s?[:：]?\s?)?"
    rf"(?:<{_URL}>|{_URL}|\[(?:{_URL})?\]\({_URL}\))",
    re.IGNORECASE,
)
_DECORATION = str.maketrans({c: " " for c in "*_`~()（）[]【】"})
_END_PUNCT = ".。,，;；!！:："


def _checks(text: str) -> list[re.Pattern[str]]:
    """The patterns worth running on ``text``: those whose hint it holds."""
    found = {m.group() for m in _HINT.finditer(text.lower())}
    return [pattern for hints, pattern in _CHECKS if found & hints] if found else []


def has_secret(text: str) -> bool:
    """Whether ``text`` holds something that looks like a secret (linear in its length)."""
    return any(pattern.search(text) for pattern in _checks(text))


def split_secret(left: str, right: str) -> bool:
    """Whether a secret runs across the break between two lines: the end of ``left`` joined to the start of
    ``right`` (its indentation and bullet marker left out) holds a secret that neither holds alone."""
    head = left.rstrip()[-SPLIT_WINDOW:]
    tail = strip_marker(right.lstrip())[:SPLIT_WINDOW]
    joined = head + tail
    return any(m.start() < len(head) < m.end() for pattern in _checks(joined) for m in pattern.finditer(joined))


_MARKER = re.compile(r"(?:[-*+]|\d{1,9}[.)])(?:[ \t]+|$)")


def strip_marker(line: str) -> str:
    """A bullet's text without its indentation and marker (``- ``, ``* ``, ``1. ``); other lines unchanged."""
    body = line.lstrip(" \t")
    found = _MARKER.match(body)
    return body[found.end() :] if found else line


def content(text: str) -> str:
    """What a bullet or line says: marker, HTML comments, emphasis and brackets out, spacing collapsed."""
    return " ".join(_uncomment(strip_marker(text)).split())


def _uncomment(text: str) -> str:
    """``text`` without its HTML comments (``<!-- seen: … -->``); an unclosed one is left as it is. Linear."""
    out: list[str] = []
    position = 0
    while (start := text.find("<!--", position)) >= 0 and (end := text.find("-->", start + 4)) >= 0:
        out.append(text[position:start])
        out.append(" ")
        position = end + 3
    out.append(text[position:])
    return "".join(out)


def date_only(said: str) -> bool:
    """Whether a bullet or line (its ``content``) holds only a date or a time (a label like ``Updated:`` /
    ``更新：`` allowed)."""
    said = said.translate(_DECORATION).strip().rstrip(_END_PUNCT).strip()
    return bool(said) and len(said) <= SHORT and _DATE_ONLY.fullmatch(" ".join(said.split())) is not None


def url_only(said: str) -> bool:
    """Whether a bullet or line (its ``content``) holds only a URL (bare, in <>, or a link whose text is empty or
    the URL itself)."""
    said = said.strip().rstrip(_END_PUNCT).strip()
    return bool(said) and len(said) <= SHORT and _URL_ONLY.fullmatch(said) is not None


def normal(said: str) -> str:
    """A bullet (its ``content``) as duplicates are compared: case folded, end punctuation off."""
    return said.casefold().rstrip(_END_PUNCT + " ")
