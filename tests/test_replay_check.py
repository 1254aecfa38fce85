"""The replay store and the replay check (issue 22 item 8; memoryd/curate/trace.py and replay.py) on real files:
prompts whose answers were injected are kept (bounded, no passage text), and a would-be MEMORY.md that loses an answer
is held with the list of what it loses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from memoryd.curate import observe
from memoryd.curate.replay import replay_check
from memoryd.curate.trace import Answer, Job, Recall, TraceWriter, line_digest, session_label
from memoryd.settings import ObservabilitySettings

MEMORY = """# Project memory

## Hardware
- The XR board's UART runs at 115200 baud; 串口超时 after 3 s means the FIFO overflowed
- KX-200 firmware 1.2 needs flow control rts_cts

## Tooling
- The deploy script lives in tools/deploy.sh and needs the VPN
- Run the tests with make test; the e2e ones need a display

## 约定
- 提交前运行 make lint，中文注释保持简短
"""


def workspace(tmp_path: Path, memory: str = MEMORY) -> Path:
    root = tmp_path / "ws"
    (root / "memory").mkdir(parents=True)
    (root / "memory" / "MEMORY.md").write_text(memory, encoding="utf-8")
    return root


def line_of(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.split("\n"), 1) if needle in line)


def recall(query: str, *answers: Answer) -> Recall:
    return Recall(
        ts=observe.ts(),
        session="s1",
        query=query,
        trigger="injected",
        hits=len(answers),
        injected=len(answers),
        past=False,
        recent=0,
        answers=answers,
    )


def answer(root: Path, needle: str, item_id: str | None = None, snippet: str | None = None) -> Answer:
    text = (root / "memory" / "MEMORY.md").read_text(encoding="utf-8")
    line = line_of(text, needle)
    shown = snippet if snippet is not None else text.split("\n")[line - 1].replace("UART", "**UART**")
    return Answer("memory/MEMORY.md", line, 1, item_id, shown)


def keep(root: Path, *recalls: Recall, settings: ObservabilitySettings | None = None) -> TraceWriter:
    writer = TraceWriter(settings or ObservabilitySettings())
    writer.write([Job("ws_x", root, r) for r in recalls])
    return writer


def replay_rows(root: Path) -> list[dict[str, Any]]:
    path = root / observe.REPLAY
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


def test_kept_rows_hold_the_prompt_and_digests_never_the_passage(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    keep(root, recall("what baud does the XR board UART use?", answer(root, "115200", "ent_1")))
    [row] = replay_rows(root)
    assert row["query"] == "what baud does the XR board UART use?"
    assert row["item_ids"] == ["ent_1"] and row["paths"] == ["memory/MEMORY.md"]
    [kept] = row["answers"]
    assert kept["digests"] == [
        line_digest("- The XR board's UART runs at 115200 baud; 串口超时 after 3 s means the FIFO overflowed")
    ]
    raw = (root / observe.REPLAY).read_text(encoding="utf-8")
    assert "115200" not in raw and "FIFO" not in raw  # no memory text
    [trace] = [orjson.loads(line) for line in (root / observe.RECALL).read_bytes().splitlines()]
    assert trace["item_ids"] == ["ent_1"] and "query" not in trace and "baud" not in str(trace)


def test_an_answer_the_file_no_longer_says_is_not_kept(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    stale = answer(root, "115200", snippet="something the file never said")
    keep(root, recall("uart baud?", stale))
    assert replay_rows(root) == []
    assert (root / observe.RECALL).exists()  # the recall itself is still traced


def test_the_replay_store_keeps_the_newest_n(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    writer = TraceWriter(ObservabilitySettings(replay_keep=3))
    for n in range(10):
        writer.write([Job("ws_x", root, recall(f"uart baud question {n}", answer(root, "115200")))])
        assert len(replay_rows(root)) <= 6
    queries = [row["query"] for row in replay_rows(root)]
    assert queries[-1] == "uart baud question 9" and len(queries) >= 3
    assert queries == sorted(queries, key=lambda q: int(q.rsplit(" ", 1)[1]))


def test_replay_off_keeps_nothing_and_trace_off_writes_no_rows(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    keep(root, recall("uart baud?", answer(root, "115200")), settings=ObservabilitySettings(replay=False))
    assert not (root / observe.REPLAY).exists() and (root / observe.RECALL).exists()
    root2 = workspace(tmp_path / "b")
    keep(root2, recall("uart baud?", answer(root2, "115200")), settings=ObservabilitySettings(trace=False))
    assert not (root2 / observe.RECALL).exists() and (root2 / observe.REPLAY).exists()


def test_a_daemon_without_the_lock_writes_nothing(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    writer = TraceWriter(ObservabilitySettings(), may_write=lambda _ws: False)
    writer.write([Job("ws_x", root, recall("uart baud?", answer(root, "115200")))])
    assert not (root / observe.OBSERVABILITY_DIR).exists()


def test_a_would_be_memory_that_drops_an_answer_is_held_with_the_list(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    keep(
        root,
        recall("what baud does the XR board UART use?", answer(root, "115200", "ent_1")),
        recall("where is the deploy script?", answer(root, "deploy.sh")),
        recall("提交前要运行什么？", answer(root, "make lint")),
    )
    would_be = MEMORY.replace(
        "- The XR board's UART runs at 115200 baud; 串口超时 after 3 s means the FIFO overflowed\n", ""
    )
    verdict = replay_check(root, {"memory/MEMORY.md": would_be})
    assert verdict.held and verdict.checked == 3 and verdict.replayed == 3
    assert [(lost.query, lost.path, lost.item_id) for lost in verdict.lost] == [
        ("what baud does the XR board UART use?", "memory/MEMORY.md", "ent_1")
    ]


def test_a_would_be_memory_that_keeps_every_answer_passes(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    keep(
        root,
        recall("what baud does the XR board UART use?", answer(root, "115200")),
        recall("提交前要运行什么？", answer(root, "make lint")),
    )
    grown = MEMORY.replace("## Tooling\n", "## Tooling\n- CI runs on the self-hosted runner\n")
    grown += "\n## Decisions\n- Keep the retry budget at 300 ms\n  (re-measured)\n"
    verdict = replay_check(root, {"memory/MEMORY.md": grown})
    assert not verdict.held and verdict.checked == 2 and verdict.lost == []


def test_an_answer_drowned_out_of_the_top_k_is_lost(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    keep(root, recall("where is the deploy script?", answer(root, "deploy.sh")))
    noise = "".join(
        f"\n## Deploy notes {n}\n- the deploy script deploy script deploy script variant {n}\n" for n in range(10)
    )
    verdict = replay_check(root, {"memory/MEMORY.md": MEMORY + noise}, top_k=3)
    assert verdict.held and [lost.query for lost in verdict.lost] == ["where is the deploy script?"]
    assert not replay_check(root, {"memory/MEMORY.md": MEMORY + noise}, top_k=20).held


def test_only_answers_in_changed_files_count(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    keep(root, recall("what baud does the XR board UART use?", answer(root, "115200")))
    verdict = replay_check(root, {"memory/INSIGHTS.md": "## Lessons\n- nothing about uarts\n"})
    assert not verdict.held and verdict.checked == 0


def test_a_removed_file_loses_its_answers(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    keep(root, recall("what baud does the XR board UART use?", answer(root, "115200")))
    assert replay_check(root, {"memory/MEMORY.md": None}).held


def test_an_answer_already_gone_before_the_change_is_stale_not_held(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    keep(root, recall("what baud does the XR board UART use?", answer(root, "115200")))
    edited = MEMORY.replace("115200 baud", "921600 baud")  # a person changed it since the prompt
    (root / "memory" / "MEMORY.md").write_text(edited, encoding="utf-8")
    verdict = replay_check(root, {"memory/MEMORY.md": edited.replace("## Tooling", "## Tools")})
    assert not verdict.held and verdict.stale == 1 and verdict.checked == 0


def test_current_texts_given_by_the_caller_are_used(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    keep(root, recall("what baud does the XR board UART use?", answer(root, "115200")))
    (root / "memory" / "MEMORY.md").unlink()  # the pipeline hands the text it read instead
    dropped = MEMORY.replace("115200", "(unknown)")
    assert replay_check(root, {"memory/MEMORY.md": dropped}, current={"memory/MEMORY.md": MEMORY}).held


def test_a_forgotten_item_is_not_replayed(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    keep(root, recall("what baud does the XR board UART use?", answer(root, "115200", "ent_gone")))
    (root / "data" / "memory" / "forgotten.json").write_bytes(
        orjson.dumps({"ent_gone": {"path": "memory/MEMORY.md", "heading": "Hardware"}})
    )
    assert not replay_check(root, {"memory/MEMORY.md": ""}).held


def test_the_check_can_be_turned_off(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    keep(root, recall("what baud does the XR board UART use?", answer(root, "115200")))
    verdict = replay_check(root, {"memory/MEMORY.md": ""}, enabled=False)
    assert not verdict.held and not verdict.enabled


def test_only_the_newest_keep_rows_are_replayed(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    keep(
        root,
        recall("what baud does the XR board UART use?", answer(root, "115200")),
        recall("where is the deploy script?", answer(root, "deploy.sh")),
    )
    would_be = MEMORY.replace("115200", "(unknown)")
    assert replay_check(root, {"memory/MEMORY.md": would_be}, keep=2).held
    assert not replay_check(root, {"memory/MEMORY.md": would_be}, keep=1).held


@pytest.mark.parametrize(
    "line",
    [
        b"{not json",
        b"[]",
        b'{"ts": "x", "query": 3, "answers": []}',
        b'{"query": "q", "answers": "nope"}',
        b'{"query": "uart baud", "answers": [{"path": "memory/MEMORY.md", "start_line": 1, "digests": ["zz"]}]}',
        b'{"query": "uart baud", "answers": [{"path": "../../etc/passwd", "start_line": 1, "digests": ["0123456789abcdef"]}]}',
        b'{"query": "uart baud", "answers": [{"path": "memory/MEMORY.md", "start_line": true, "digests": []}]}',
        b"\x00" * 10_000,
    ],
)
def test_hostile_replay_rows_are_skipped(tmp_path: Path, line: bytes) -> None:
    root = workspace(tmp_path)
    keep(root, recall("what baud does the XR board UART use?", answer(root, "115200")))
    with (root / observe.REPLAY).open("ab") as f:
        f.write(line + b"\n")
    verdict = replay_check(root, {"memory/MEMORY.md": MEMORY.replace("115200", "(unknown)")})
    assert verdict.held and len(verdict.lost) == 1  # the good row still counts; the crafted one never reads a file


def test_a_fifo_or_symlink_replay_file_holds_nothing(tmp_path: Path) -> None:
    import os

    root = workspace(tmp_path)
    (root / observe.OBSERVABILITY_DIR).mkdir(parents=True)
    os.mkfifo(root / observe.REPLAY)
    assert not replay_check(root, {"memory/MEMORY.md": ""}).held
    (root / observe.REPLAY).unlink()
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_text("{}\n")
    (root / observe.REPLAY).symlink_to(outside)
    assert not replay_check(root, {"memory/MEMORY.md": ""}).held


def test_session_labels_stay_short_and_opaque() -> None:
    assert session_label("0b6e8a5c-1d2e-4f00-9a1b-2c3d4e5f6a7b") == "0b6e8a5c-1d2e-4f00-9a1b-2c3d4e5f6a7b"
    hostile = session_label("../../x\n" + "y" * 4000)
    assert hostile is not None and hostile.startswith("sha256:") and len(hostile) == 23
    assert session_label(None) is None
