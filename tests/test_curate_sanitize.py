"""curate.sanitize: what a consolidation's Markdown may write — secrets and <private> spans never, the rest by the
curate policy (length, date-only and URL-only lines, duplicates, lines outside sections, emptied sections) — with
what it dropped counted by reason and never its text; Chinese throughout; hostile sizes stay linear."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.curate import patterns
from memoryd.curate.sanitize import ROW_REASONS, sanitize
from memoryd.settings import CurateSettings

POLICY = CurateSettings()

# One of each kind of secret the policy names (built from parts, so this file holds none whole)
SECRETS = {
    "openai": "sk-" + "proj-" + "Q" * 8 + "w3" * 12,
    "anthropic": "sk-" + "ant-api03-" + "Zx9" * 12,
    "github_pat": "ghp_" + "A1b2" * 9,
    "github_oauth": "gho_" + "Kk7" * 12,
    "github_fine": "github_pat_" + "11AB" * 10,
    "aws": "AKIA" + "IOSFODNN7EXAMPL3",
    "slack": "xoxb-" + "1234567890-abcdefgh",
    "google": "AIza" + "SyD" + "x" * 32,
    "jwt": "eyJhbGciOiJIUzI1NiJ9" + "." + "eyJzdWIiOiIxMjM0NTY3ODkwIn0" + "." + "dozjgNryP4J3jVmNHl0w5N",
    "password": "password=" + "hunter2hunter2!",
    "token": "token: " + "a8f5f167f44f4964e6c998dee827110c",
    "chinese": "数据库密码：" + "Zy7&kq9p2x",
}

UPDATE = """## 约定
- 串口波特率固定为 921600，必须开 RTS/CTS 流控
- jobs store 放在 ~/.config/msgcode/cron/jobs.json

## Build
- `make test` runs lint, types and the unit tests
"""


def reasons(markdown: str, policy: CurateSettings = POLICY) -> dict[str, int]:
    return {k: v for k, v in sanitize(markdown, policy).counts().items() if v}


def test_a_clean_update_passes_byte_for_byte() -> None:
    result = sanitize(UPDATE, POLICY)
    assert result.text == UPDATE and not result.modified and result.dropped == []
    assert result.counts() == dict.fromkeys(ROW_REASONS, 0)


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_every_kind_of_secret_is_dropped_and_never_in_the_text(kind: str) -> None:
    secret = SECRETS[kind]
    update = f"## 凭据\n- 线上环境 {secret} 用于部署\n- 串口超时 3 秒\n"
    result = sanitize(update, POLICY)
    assert secret not in result.text and "串口超时 3 秒" in result.text
    assert result.counts()["secret"] == 1 and result.modified
    assert secret not in repr(result.dropped)  # reasons and line numbers only
    assert [(d.reason, d.line) for d in result.dropped] == [("secret", 2)]


@pytest.mark.parametrize(
    "harmless",
    [
        "- token: optional",
        "- password: required for staging",
        "- api_key: read from the environment variable OPENAI_API_KEY",
        "- token: ${GITHUB_TOKEN}",
        "- password: <your password>",
        "- use sk-learn for clustering",
        "- 密码：见 1Password",
        "- 令牌放在环境变量里",
        "- Asia/Shanghai is the time zone",
    ],
)
def test_what_only_names_a_secret_is_kept(harmless: str) -> None:
    assert sanitize(f"## 约定\n{harmless}\n", POLICY).text == f"## 约定\n{harmless}\n"


def test_a_secret_split_over_lines_is_dropped_whole() -> None:
    key = SECRETS["anthropic"]
    head, tail = key[:14], key[14:]
    cases = [
        f"## K\n- the key {head}\n  {tail}\n- 其它\n",  # a continuation line
        f"## K\n- the key {head}\n- {tail}\n- 其它\n",  # two bullets
        f"## K\nthe key {head}\n{tail}\n- 其它\n",  # two text lines
    ]
    for update in cases:
        result = sanitize(update, POLICY)
        assert head not in result.text and tail not in result.text, update
        assert result.text == "## K\n- 其它\n" and result.counts()["secret"] >= 1


def test_a_private_key_block_goes_from_begin_to_end_and_an_unclosed_one_to_the_next_section() -> None:
    block = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\nQkq0ZmWq\n-----END RSA PRIVATE KEY-----\n"
    result = sanitize(f"## 部署\n- 用这个钥匙\n{block}- 之后的事实\n", POLICY)
    assert "MIIE" not in result.text and "BEGIN" not in result.text
    assert result.text == "## 部署\n- 用这个钥匙\n- 之后的事实\n"
    unclosed = "## 部署\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\nAAAABG5vbmU\n## 别的\n- 还在\n"
    result = sanitize(unclosed, POLICY)
    assert result.text == "## 别的\n- 还在\n" and "b3Blbn" not in result.text
    assert result.counts()["secret"] == 3 and result.counts()["empty_section"] == 1


def test_a_secret_in_a_heading_takes_its_section() -> None:
    update = f"## token {SECRETS['github_pat']}\n- 这里的事实跟着走\n## 留下\n- 这个留下\n"
    result = sanitize(update, POLICY)
    assert result.text == "## 留下\n- 这个留下\n" and result.counts()["secret"] == 2


@pytest.mark.parametrize(
    "spelling",
    [
        "<private>秘密</private>",
        "<PRIVATE >秘密</private >",
        "< Private\n>秘密</ PRIVATE>",
        '<private reason="x">秘密</private>',
        "＜private＞秘密＜/private＞",
        "<private>外<private>秘密</private>仍在内</private>",
    ],
)
def test_private_spans_in_every_spelling_are_stripped_and_counted(spelling: str) -> None:
    result = sanitize(f"## 约定\n- 部署密钥 {spelling}放在 vault\n", POLICY)
    assert "秘密" not in result.text and "仍在内" not in result.text and "private" not in result.text.lower()
    assert result.text == "## 约定\n- 部署密钥 放在 vault\n"
    assert result.counts()["private"] >= 1 and result.dropped[0].line == 2


def test_an_unclosed_private_span_runs_to_the_end() -> None:
    result = sanitize("## 约定\n- 公开\n- <private>秘密\n## 下一节\n- 也是秘密\n", POLICY)
    assert result.text == "## 约定\n- 公开\n"


def test_date_url_duplicate_empty_and_outside_lines() -> None:
    update = (
        "Here is the updated memory:\n- stray bullet\n\n"
        "## 约定\n- 2026-02-28\n- 2026年2月28日 星期六 14:00\n- Updated: Feb 28, 2026\n- 2026-02-28 决定用 uv\n"
        "- https://example.com/docs\n- 参考：<https://example.com>\n- [文档](https://example.com) 说明了流控\n"
        "- 决定用 uv\n- 决定用 UV。\n- <!-- seen: 2026-02-28 -->\n"
    )
    result = sanitize(update, POLICY)
    assert result.text == "## 约定\n- 2026-02-28 决定用 uv\n- [文档](https://example.com) 说明了流控\n- 决定用 uv\n"
    assert reasons(update) == {"outside_section": 2, "date_line": 3, "url": 2, "duplicate": 1, "empty": 1}
    loose = CurateSettings(outside_sections="keep", drop_date_lines=False, drop_url_lines=False, drop_duplicates=False)
    kept = sanitize(update, loose)
    assert kept.text.startswith("Here is the updated memory:\n- stray bullet\n\n## 约定\n- 2026-02-28\n")
    assert "- 决定用 UV。" in kept.text and reasons(update, loose) == {"empty": 1}


def test_duplicates_are_per_section() -> None:
    update = "## A\n- 同一条\n## B\n- 同一条\n- 同一条\n"
    assert sanitize(update, POLICY).text == "## A\n- 同一条\n## B\n- 同一条\n"


def test_too_long_bullets_are_cut_or_dropped_counting_characters_not_bytes() -> None:
    policy = CurateSettings(max_bullet_chars=40)
    long_bullet = "- " + "串口" * 30
    fits = "- " + "串" * 38  # 40 characters, 116 bytes
    update = f"## 约定\n{long_bullet}\n{fits}\n"
    cut = sanitize(update, policy)
    first = cut.text.split("\n")[1]
    assert len(first) == 40 and first.endswith("…") and first.startswith("- 串口串口")
    assert f"\n{fits}\n" in cut.text and cut.dropped[0].cut and cut.counts()["too_long"] == 1
    dropped = sanitize(update, policy.model_copy(update={"too_long": "drop"}))
    assert dropped.text == f"## 约定\n{fits}\n" and not dropped.dropped[0].cut


def test_headings_and_code_blocks_are_never_cut() -> None:
    policy = CurateSettings(max_bullet_chars=40)
    update = "## " + "很长的标题" * 10 + "\n- 在长标题下\n## 代码\n```\n" + "x = 1\n" * 40 + "```\n- 后面\n"
    result = sanitize(update, policy)
    assert result.text == "## 代码\n- 后面\n"
    assert reasons(update, policy) == {"too_long": 3}


def test_a_heading_in_a_code_block_is_code_and_a_secret_in_one_drops_the_block() -> None:
    update = "## 例子\n```md\n## 不是标题\n- 也不是条目\n- 也不是条目\n```\n"
    assert sanitize(update, POLICY).text == update
    leaky = f"## 例子\n```sh\nexport OPENAI_API_KEY={SECRETS['openai']}\n```\n- 别的\n"
    result = sanitize(leaky, POLICY)
    assert result.text == "## 例子\n- 别的\n" and result.dropped[0].lines == 3


def test_a_section_sanitize_emptied_goes_but_an_empty_one_given_stays() -> None:
    update = "## 链接 [replace]\n- https://a.example\n- 2026-01-01\n## 清空 [replace]\n## 留下\n- 事实\n"
    result = sanitize(update, POLICY)
    assert result.text == "## 清空 [replace]\n## 留下\n- 事实\n"
    assert result.counts()["empty_section"] == 1


def test_line_endings_and_blank_runs() -> None:
    update = "\r\n\r\n## 约定\r\n- 一\r\n\r\n\r\n\r\n- 二\r\n\r\n"
    assert sanitize(update, POLICY).text == "## 约定\n- 一\n\n- 二\n"


def test_hostile_sizes_finish_and_stay_correct() -> None:
    """A 10 MB update (one line), 100,000 bullets, nested tags by the thousand: each answered, linearly."""
    huge = sanitize("## 大\n- " + "串" * 10_000_000 + "\n", POLICY)
    assert len(huge.text) == len("## 大\n") + POLICY.max_bullet_chars + 1 and huge.counts()["too_long"] == 1
    many = "## 大节\n" + "".join(f"- 第{i}条 fact {i}\n" for i in range(100_000))
    result = sanitize(many + "- 第7条 fact 7\n", POLICY)
    assert result.text == many and result.counts()["duplicate"] == 1
    nested = "## 约定\n- 开始 " + "<private>" * 5000 + "秘密" + "</private>" * 5000 + " 结束\n"
    assert sanitize(nested, POLICY).text == "## 约定\n- 开始  结束\n"
    # patterns that would be quadratic with a careless regex
    for line in ("eyJ" * 1_000_000, "password=" * 300_000, "<!--" * 500_000, "[https://a](" * 200_000):
        assert not sanitize("## 约定\n- " + line + "\n", POLICY).text.count(line[:20] * 100)


_LINES = st.sampled_from(
    [
        "## 约定",
        "## [replace] 节",
        "- 串口波特率 921600",
        "- 重复",
        "- 重复",
        "  续行",
        "- 2026-02-28",
        "- https://example.com",
        "```",
        "",
        "正文一行",
        "<private>秘",
        "</private>",
        "- key " + SECRETS["anthropic"][:12],
        SECRETS["anthropic"][12:],
        "-----BEGIN EC PRIVATE KEY-----",
        "-----END EC PRIVATE KEY-----",
        "- " + SECRETS["aws"],
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_LINES, max_size=30), st.integers(20, 80), st.sampled_from(["truncate", "drop"]))
def test_no_output_ever_holds_a_secret_and_sanitize_is_idempotent(lines: list[str], limit: int, mode: str) -> None:
    policy = CurateSettings(max_bullet_chars=limit, too_long=mode)  # type: ignore[arg-type]
    result = sanitize("\n".join(lines), policy)
    out = result.text.split("\n")
    assert not any(patterns.has_secret(line) for line in out)
    assert not any(patterns.split_secret(a, b) for a, b in itertools.pairwise(out))
    assert "BEGIN EC" not in result.text and SECRETS["anthropic"] not in "".join(line.strip() for line in out)
    assert "秘" not in result.text
    again = sanitize(result.text, policy)
    assert again.text == result.text and not again.modified
