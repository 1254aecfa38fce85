"""A question's embedding through the kept per-token rows (memoryd/embed/usequery.py) is the package's own, and the
rows it keeps stay within their bound."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from memoryd.embed.local import UseM3
from memoryd.embed.usequery import MAX_TOKENS, rows_for

QUESTIONS = [
    "why did we turn on flow control on the uart?",
    "上周我们决定用哪个CDN供应商？",
    "部署失败时怎么回滚 rollback the deploy",
    "ERR_TLS_CERT_ALTNAME_INVALID on staging",
    "x",
    "",
    "上",
]


@pytest.fixture(scope="module")
def model() -> UseM3:
    return UseM3()


def _package(model: UseM3, text: str) -> np.ndarray:
    return np.frombuffer(model.encode([text])[0], "<f4")  # a batch: the package's forward pass


def _question(model: UseM3, text: str) -> np.ndarray:
    return np.frombuffer(model.encode([text], query=True)[0], "<f4")


def test_a_question_is_embedded_through_the_kept_rows(model: UseM3) -> None:
    rows = model._questions
    assert rows is not None  # the pinned package has the shape the rows were written for
    before = len(rows)
    model.encode(["a question about the release checklist"], query=True)
    assert len(rows) > before  # its tokens are kept: the path was taken, not the package's


@pytest.mark.parametrize("text", QUESTIONS)
def test_the_kept_rows_give_the_package_s_vector(model: UseM3, text: str) -> None:
    first = _question(model, text)  # its tokens worked out now
    again = _question(model, text)  # and read back
    expected = _package(model, text)
    assert float(first @ expected) > 0.99999
    assert np.array_equal(first, again)


def test_a_question_of_tokens_pushed_out_and_worked_out_again_is_the_same(model: UseM3) -> None:
    rows = rows_for(model._model._backend, capacity=0)  # the smallest it allows: two questions' worth
    assert rows is not None and rows.capacity == 2 * MAX_TOKENS
    text = QUESTIONS[0]
    first = rows.encode(text)
    assert first is not None
    tokens = set(model._model._backend.sp.encode(text, out_type=int, add_bos=True, add_eos=True))
    for n in range(20):  # many other tokens (distinct Chinese characters): the first question's are pushed out
        rows.encode("".join(chr(0x4E00 + 50 * n + i) for i in range(50)))
    assert len(rows) == rows.capacity
    assert len(tokens & set(rows._slots)) <= 2  # only the start and end tokens every text has are kept
    again = rows.encode(text)
    assert again is not None
    assert float(again @ first) > 0.99999
    assert float(again @ _package(model, text)) > 0.99999


def test_a_long_text_goes_through_the_package(model: UseM3) -> None:
    rows = model._questions
    assert rows is not None
    long = "the quick brown fox jumps over the lazy dog " * 40
    assert rows.encode(long) is None  # more tokens than MAX_TOKENS: not kept
    assert float(_question(model, long) @ _package(model, long)) > 0.99999


def test_questions_embedded_on_several_threads_at_once_are_each_their_own(model: UseM3) -> None:
    rows = rows_for(model._model._backend, capacity=0)  # small: the threads push each other's tokens out
    assert rows is not None
    texts = [f"{q} {n} 第{n}号 ticket-{n * 37}" for n in range(40) for q in QUESTIONS[:4]]
    expected = {t: _package(model, t) for t in texts}
    start = threading.Barrier(4)

    def run(part: list[str]) -> list[tuple[str, float]]:
        start.wait()
        out = []
        for text in part * 3:
            vector = rows.encode(text)
            assert vector is not None
            out.append((text, float(vector @ expected[text])))
        return out

    with ThreadPoolExecutor(4) as pool:
        results = [r for part in pool.map(run, [texts[n::4] for n in range(4)]) for r in part]
    assert len(results) == 3 * len(texts)
    worst = min(cosine for _, cosine in results)
    assert worst > 0.99999, worst
