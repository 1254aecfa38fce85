"""textindex against real APSW FTS5 tables: Chinese, natural-language questions, identifiers, hostile input."""

from __future__ import annotations

import re
from collections.abc import Iterator

import apsw
import pytest
import rjieba
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memoryd.text import textindex
from memoryd.text.textindex import (
    IDENT_WEIGHT,
    MAX_TERMS,
    TEXT_VERSION,
    TOKENIZER,
    index_fields,
    index_token,
    join_terms,
    match_terms,
    query_words,
    rank_sql,
)


def match_expression(query: str) -> str | None:
    """What the daemon sends to FTS5 for ``query`` (before pruning common words)."""
    return join_terms(match_terms(query))


def make_table(texts: list[str], tokenizer: str = TOKENIZER) -> apsw.Connection:
    conn = apsw.Connection(":memory:")
    conn.execute(f"CREATE VIRTUAL TABLE chunks_fts USING fts5(body, idents, tokenize='{tokenizer}')")
    conn.execute(f"INSERT INTO chunks_fts(chunks_fts, rank) VALUES('rank', '{rank_sql()}')")
    conn.execute("CREATE VIRTUAL TABLE chunks_vocab USING fts5vocab(chunks_fts, 'row')")
    for rowid, text in enumerate(texts, 1):
        conn.execute("INSERT INTO chunks_fts(rowid, body, idents) VALUES(?, ?, ?)", (rowid, *index_fields(text)))
    return conn


def search(conn: apsw.Connection, query: str, limit: int = 10) -> list[int]:
    match = match_expression(query)
    if match is None:
        return []
    sql = "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY rank LIMIT ?"
    return [int(row[0]) for row in conn.execute(sql, (match, limit))]


@pytest.fixture(scope="module")
def conn() -> Iterator[apsw.Connection]:
    c = make_table(SAFETY_ROWS)
    yield c
    c.close()


SAFETY_ROWS = [
    "今天调试发现串口超时问题 ERR_UART_TIMEOUT_0x3F",
    'quotes " and (parens) AND OR NOT NEAR * ^ - : {body}',
    "facts.transport.baud = 115200 in src/drivers/uart.c",
]


def test_constants_and_ranking_forms() -> None:
    assert isinstance(TEXT_VERSION, int)
    assert IDENT_WEIGHT > 1
    assert rank_sql() == f"bm25(1.0, {IDENT_WEIGHT})"
    conn = make_table(["uart timeout", "uart"])
    ordered = conn.execute(
        "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY rank",
        (match_expression("uart timeout"),),
    ).fetchall()
    assert ordered[0][0] == 1


# --- Chinese -------------------------------------------------------------------------------------------------

CHINESE = ["今天调试发现串口超时问题", "固件版本升级完成了", "明天开会讨论发布计划", "串行接口的文档"]


@pytest.mark.parametrize(
    ("query", "expected"), [("串口超时", 1), ("串口", 1), ("固件版本", 2), ("超时", 1), ("发布计划", 3)]
)
def test_chinese_words_are_found_inside_sentences(query: str, expected: int) -> None:
    assert search(make_table(CHINESE), query)[:1] == [expected]


def test_plain_unicode61_cannot_do_this() -> None:
    """Why the body is pre-segmented: unicode61 indexes a whole CJK sentence as one token."""
    conn = apsw.Connection(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(body, tokenize='unicode61')")
    conn.executemany("INSERT INTO t(body) VALUES(?)", [(t,) for t in CHINESE])
    for query in ("串口超时", "串口", "固件版本"):
        assert conn.execute("SELECT rowid FROM t WHERE t MATCH ?", (f'"{query}"',)).fetchall() == []


def tokens(conn: apsw.Connection, text: str) -> list[str]:
    name, *args = TOKENIZER.split()
    tokenize = conn.fts5_tokenizer(name, args)
    return [str(t[0]) for t in tokenize(text.encode(), apsw.FTS5_TOKENIZE_DOCUMENT, None, include_offsets=False)]


def query_tokens(conn: apsw.Connection, query: str) -> set[str]:
    """The index tokens a query's word terms look for."""
    found: set[str] = set()
    for term in match_terms(query):
        for string in re.findall(r'"((?:[^"]|"")*)"', term.expr):
            if not term.expr.startswith("idents"):
                found.update(tokens(conn, string.replace('""', '"')))
    return found


@pytest.mark.parametrize("text", ["今天调试发现串口超时问题", "固件版本升级", "串口超时", "中华人民共和国成立了"])
def test_query_tokens_are_a_subset_of_index_tokens(text: str) -> None:
    conn = make_table([text])
    assert query_tokens(conn, text) <= set(tokens(conn, index_fields(text)[0]))
    assert rjieba.cut_for_search("固件版本升级") == ["固件", "版本", "升级", "版本升级"]  # the sub-words help


PIECES = [
    "串口",
    "超时",
    "固件",
    "版本",
    "升级",
    "问题",
    "调试",
    "的",
    "了",
    "ＵＡＲＴ２",
    "uart",
    "KX-200",
    "ＫＸ－２００",
    "0x3F",
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(PIECES), max_size=8), st.sampled_from(["", " ", "，"]))
def test_subset_property_on_random_text(pieces: list[str], glue: str) -> None:
    """For the same string, every token a query looks for is in the index (body words and identifier forms)."""
    text = glue.join(pieces)
    conn = apsw.Connection(":memory:")
    body, idents = index_fields(text)
    assert query_tokens(conn, text) <= set(tokens(conn, body))
    wanted = {t.expr.split('"')[1] for t in match_terms(text) if t.expr.startswith("idents")}
    assert wanted <= set(idents.split())


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.text(
            alphabet=st.sampled_from("串口超时固件版本升级中华人民共和国あいうカタカナ한국어"), min_size=1, max_size=10
        ),
        min_size=1,
        max_size=6,
    )
)
def test_batched_segmentation_equals_segmenting_each_run(runs: list[str]) -> None:
    expected = [" ".join(w for w in rjieba.cut_for_search(run)) for run in runs]
    assert textindex._segment_runs(runs) == expected


def test_mixed_english_and_chinese() -> None:
    conn = make_table(
        [
            "KX-200 固件版本升级后 uart timeout 消失",
            "发现ERR_UART问题，重启后恢复",
            "unrelated english note about the weather",
            "无关的中文笔记",
        ]
    )
    assert search(conn, "固件版本 timeout")[:1] == [1]
    assert search(conn, "KX-200 升级")[:1] == [1]
    assert search(conn, "ERR_UART")[:1] == [2]  # an identifier glued to Chinese text
    assert search(conn, "重启")[:1] == [2]


def test_full_width_letters_and_digits_match_ascii() -> None:
    conn = make_table(["ＵＡＲＴ２ 超时", "nothing here"])
    assert search(conn, "uart2") == [1]
    conn = make_table(["UART2 超时", "nothing here"])
    assert search(conn, "ＵＡＲＴ２") == [1]


# --- natural-language queries ------------------------------------------------------------------------------


def test_questions_are_quoted_or_joined_without_stop_words() -> None:
    assert match_expression("What is the baud rate of the uart?") == ('body : "baud" OR body : "rate" OR body : "uart"')
    expr = match_expression("我们的串口超时是什么原因呢？")
    assert expr is not None
    assert '"串口"' in expr and '"原因"' in expr
    assert all(f'"{w}"' not in expr for w in ("我们", "的", "是", "什么", "呢"))
    assert " AND " not in expr


def test_stop_words_only_falls_back_to_all_words() -> None:
    assert match_expression("what is it") == 'body : "what" OR body : "is" OR body : "it"'


def test_terms_are_deduplicated_and_capped() -> None:
    assert match_expression("uart UART Uart") == 'body : "uart"'
    many = " ".join(f"word{i}x" for i in range(500))
    assert len(match_terms(many)) == MAX_TERMS


def test_nothing_searchable_is_none() -> None:
    for query in ["", "   ", '"', "()", "*^-:", "😀🎉", "\x00\x01", "，。？！"]:
        assert match_expression(query) is None, query
        assert join_terms(match_terms(query)) is None


def test_fts5_syntax_is_just_words(conn: apsw.Connection) -> None:
    expr = match_expression('NEAR(uart timeout) AND "quotes" OR body:x* -y ^z')
    assert expr is not None and "NEAR(" not in expr.replace('body : NEAR("', "")
    assert search(conn, 'NEAR(uart timeout) AND "quotes" OR body:x* -y ^z')
    assert search(conn, "AND OR NOT") == [2]  # the words themselves are searchable


def test_ten_kilobytes_of_query_are_capped_and_answered(conn: apsw.Connection) -> None:
    """Hostile queries become at most MAX_TERMS clauses and are answered (their speed: bench/bench_text.py)."""
    queries = [
        ("串口超时 uart timeout ERR_UART_TIMEOUT_0x3F what does it mean? " * 200)[:10_000],
        "".join(chr(0x4E00 + i % 2000) for i in range(10_000)),
        " ".join(f"w{i}" for i in range(3000)),
    ]
    for query in queries:
        assert len(match_terms(query)) <= MAX_TERMS
    assert search(conn, queries[0])[:1] == [1]  # the row with the identifier, among the capped terms


def test_word_terms_carry_the_index_token() -> None:
    conn = make_table(["The paintings were running late, café naïve 串口"])
    vocab = {str(r[0]) for r in conn.execute("SELECT term FROM chunks_vocab")}
    for term in match_terms("Paintings running café naïve 串口"):
        assert term.token in vocab
    assert index_token("Running") == "run"
    assert index_token("two words") is None
    assert [t.token for t in match_terms("ERR_X")][:1] == [None]


def test_query_words_for_snippets() -> None:
    assert query_words("what does ERR_UART_TIMEOUT_0x3F mean for 串口超时") == [
        "err_uart_timeout_0x3f",
        "err",
        "uart",
        "timeout",
        "0x3f",
        "mean",
        "串口",
        "超时",
    ]


# --- any input is safe -------------------------------------------------------------------------------------

FTS_SYNTAX = st.sampled_from(
    ['"', "'", "(", ")", "AND", "OR", "NOT", "NEAR", "NEAR(", "*", "-", ":", "^", "+", "{", "}", "body:", "idents :"]
)
WIDE = st.characters(codec="utf-8")  # every code point but surrogates: CJK, emoji, controls, NUL, combining marks
QUERY = st.one_of(
    st.text(alphabet=WIDE, max_size=60),
    st.lists(
        st.one_of(FTS_SYNTAX, st.text(alphabet=WIDE, max_size=8), st.sampled_from(["串口超时", "ERR_X.y", "😀"])),
        max_size=12,
    ).map(" ".join),
    st.lists(st.one_of(FTS_SYNTAX, st.text(alphabet='ab1_.:/-\\"()*', max_size=6)), max_size=12).map("".join),
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(QUERY)
def test_any_query_is_valid_fts5(conn: apsw.Connection, query: str) -> None:
    match = match_expression(query)
    if match is not None:
        conn.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY rank", (match,)).fetchall()


def test_hostile_examples(conn: apsw.Connection) -> None:
    for query in ['"', 'a"b', "a\x00b", "x" * 10_000, "NEAR(a b, -1)", "a:b:c", "^x", "-x", "a* b*", "\u202e\u0301"]:
        match = match_expression(query)
        if match is not None:
            conn.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?", (match,)).fetchall()


# What people write: Latin, Greek, Cyrillic (as Unicode 6.1 has them), kana, Han, Hangul, emoji,
# controls and NUL. Not the code points whose class SQLite's unicode61 (Unicode 6.1 tables) and Python (\\w, a later
# Unicode) disagree on: unassigned, private-use, format marks added since (U+061C), enclosed CJK (㊊), scripts added
# since 6.1: a query cannot name a
# word holding one of those (tracked in issue 19's report).
WRITTEN = st.one_of(
    # Latin to Cyrillic, less Greek's U+037F (Unicode 7.0)
    st.characters(
        codec="utf-8", max_codepoint=0x04FF, exclude_categories=("Cn", "Co", "Cf"), exclude_characters="\u037f"
    ),
    st.characters(min_codepoint=0x3040, max_codepoint=0x30FF),
    st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF),
    st.characters(min_codepoint=0xAC00, max_codepoint=0xD7A3),
    st.sampled_from(["😀", "🎉", "\x00", "\u200b", "\u3000", "，", "。"]),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=WRITTEN, max_size=200))
def test_any_text_can_be_indexed_and_found_by_itself(text: str) -> None:
    body, idents = index_fields(text)
    assert index_fields(text) == (body, idents)  # deterministic
    conn = make_table([text, "filler row"])
    match = match_expression(text)
    if match is not None:  # a text with a word in it: searching for the text finds it (row 1)
        found = [row[0] for row in conn.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?", (match,))]
        assert 1 in found, (text, match)
    else:  # nothing to search for: no word at all, so nothing was indexed as one
        assert not (body.strip() or idents.strip()) or not any(c.isalnum() for c in text), (text, body, idents)


IDENTISH = st.text(alphabet=st.sampled_from("aZé1 0_./:\\-串,(ǀ"), max_size=40)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            st.sampled_from(["", " ", "## 2026-02-01 09:30 — note", "- 串口超时 ERR_UART_0x3F", "src/a.c", "Ｋ２"]),
            st.text(alphabet=st.sampled_from("aZé1 0_./:\\-串口超时,(ǀ\ufeff\u3000"), max_size=30),
        ),
        max_size=30,
    ),
    st.integers(min_value=1, max_value=6),
)
def test_a_whole_document_indexes_as_its_chunks_one_by_one(lines: list[str], step: int) -> None:
    # any non-overlapping spans, with lines left out between them
    spans = [(lo, min(lo + step, len(lines))) for lo in range(0, len(lines), step + 1)]
    expected = [("\n".join(lines[lo:hi]), *index_fields("\n".join(lines[lo:hi]))) for lo, hi in spans]
    assert textindex.index_chunks(lines, spans) == expected


def test_extra_identifiers_go_to_the_idents_column_only() -> None:
    body, idents = index_fields("facts:\n  transport.uart.baud: 9600", ["facts.transport.uart.baud", "KX-200", "baud"])
    assert body == "facts:\n  transport.uart.baud: 9600"
    assert idents.split() == ["transportǀuartǀbaudǀ", "factsǀtransportǀuartǀbaudǀ", "kxǀ200ǀ"]
    assert index_fields("x", ["ＫＸ－２００"])[1] == "kxǀ200ǀ"  # folded like a query


@settings(max_examples=500, deadline=None)
@given(IDENTISH)
def test_fast_identifier_scan_equals_the_plain_regex(text: str) -> None:
    assert textindex._identifiers(text) == textindex._IDENT.findall(text)


# --- exact identifiers rank first ---------------------------------------------------------------------------


def ident_corpus() -> list[str]:
    loose = [
        "uart timeout again on the bench, uart timeout after reset, err log full of timeout",
        "ERR_UART_TIMEOUT_0x40 seen once; it is a different error code",
        "timeout timeout timeout uart uart err err 0x3f",
        "The uart driver has a timeout; we log err when it fires",
        "facts transport baud: see the transport facts page for baud settings",
        "facts.transport.parity = even",
        "transport baud transport baud facts facts",
        "src/drivers/uart.h declares the uart driver",
        "drivers in src: uart, spi, i2c. The uart driver file is large",
        "src/drivers/spi.c handles spi",
        "err uart timeout 0x3f written as words in a sentence about timeouts",
        "串口超时 uart timeout 问题",
    ]
    filler = [f"note {i}: release build {i} passed, bench {i} ok, uart cable {i} replaced" for i in range(15)]
    exact = [
        "Firmware logs ERR_UART_TIMEOUT_0x3F when the host stops reading",
        "Set facts.transport.baud to 115200 for KX-200",
        "The bug is in src/drivers/uart.c, in the RX interrupt",
    ]
    return loose + filler + exact


@pytest.mark.parametrize(
    ("query", "offset"),
    [
        ("ERR_UART_TIMEOUT_0x3F", 0),
        ("what does ERR_UART_TIMEOUT_0x3F mean", 0),
        ("err_uart_timeout_0x3f", 0),
        ("facts.transport.baud", 1),
        ("what is facts.transport.baud set to?", 1),
        ("src/drivers/uart.c", 2),
        ("where is the bug in src/drivers/uart.c", 2),
        ("uart.c", 2),
    ],
)
def test_exact_identifier_is_the_top_hit(query: str, offset: int) -> None:
    corpus = ident_corpus()
    assert len(corpus) == 30
    first_exact = len(corpus) - 2
    assert search(make_table(corpus), query)[:1] == [first_exact + offset]


def test_identifier_forms() -> None:
    body, idents = index_fields("ERR_UART_TIMEOUT_0x3F src/drivers/uart.c KX-200 v1 1.2.0 2026-02-01 09:30")
    forms = idents.split()
    assert "errǀuartǀtimeoutǀ0x3fǀ" in forms
    assert "srcǀdriversǀuartǀcǀ" in forms and "uartǀcǀ" in forms  # a path's file name too
    assert "0x3fǀ" in forms and "v1ǀ" in forms and "kxǀ200ǀ" in forms
    assert not any(f.startswith(("1ǀ", "2026", "09")) for f in forms)  # pure numbers stay in the body
    assert body.startswith("ERR_UART_TIMEOUT_0x3F")


def test_separator_style_does_not_matter_but_boundaries_do() -> None:
    conn = make_table(["KX-200 board", "KX2_00 board", "kx200 board"])
    assert search(conn, "kx_200")[:1] == [1]
    assert search(conn, "KX2.00")[:1] == [2]


def test_porter_does_not_stem_identifiers() -> None:
    conn = make_table(["ERR_RETRYING in the log", "ERR_RETRY in the log"])
    vocab = {str(r[0]) for r in conn.execute("SELECT term FROM chunks_vocab")}
    assert {"errǀretryingǀ", "errǀretryǀ"} <= vocab
    assert search(conn, "ERR_RETRY")[:1] == [2]
    assert search(conn, "ERR_RETRYING")[:1] == [1]
