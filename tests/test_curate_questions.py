"""Open questions through the real daemon: a preference conflict left to the user (ask_user) shows in context's
dynamic part — with or without a prompt, before recall — until `memoryctl answer` settles it; `new` and `both`
change MEMORY.md as one recorded change that `restore` undoes; a hostile questions file never breaks context."""

from __future__ import annotations

import json
import os
from pathlib import Path

from memoryd.curate import conflicts, questions
from memoryd.settings import CurateSettings
from tests.conftest import Daemon

MEMORY = """# 项目长期记忆

## 偏好
- Language: Python
- 包管理器：pip

## 约定
- 串口波特率固定为 921600 QZXBAUD
"""
UPDATE = "## 偏好\n- language: Rust\n- 包管理器: uv\n"


def ask(root: Path) -> list[str]:
    """What the consolidation pipeline does for an update under ask_user: find, resolve, record the questions."""
    policy = CurateSettings()
    resolved = conflicts.resolve(MEMORY, UPDATE, conflicts.find_conflicts(MEMORY, UPDATE, policy))
    return questions.ask(root, "apply_test", "memory", resolved.asked)


def setup(root: Path) -> list[str]:
    (root / "memory").mkdir(exist_ok=True)
    (root / "memory" / "MEMORY.md").write_text(MEMORY, encoding="utf-8")
    return ask(root)


def test_context_asks_until_answered_and_an_answer_is_a_restorable_change(
    daemon: Daemon, workspace: tuple[Path, str]
) -> None:
    root, ws = workspace
    language, manager = setup(root)
    with_prompt = daemon.call("context", {"workspace": ws, "query_text": "QZXBAUD 波特率是多少"})["dynamic"]
    without = daemon.call("context", {"workspace": ws})["dynamic"]
    for dynamic in (with_prompt, without):
        assert [q["question_id"] for q in dynamic["questions"]] == [language, manager]
        assert dynamic["text"].startswith("## Open questions for the user (memory)\n")
        assert f"- {manager}: 包管理器 — MEMORY.md holds “pip”, proposed “uv”" in dynamic["text"]
        assert "memoryctl answer <id> old|new|both" in dynamic["text"]
    assert without["items"] == []
    # the stable part does not change with questions (the prompt cache holds)
    assert "Open questions" not in daemon.call("context", {"workspace": ws})["stable"]["text"]

    out = daemon.memoryctl("answer", manager, "new", cwd=root)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"answered {manager}: new\n  update    memory/MEMORY.md\nrun answer_")
    assert (root / "memory" / "MEMORY.md").read_text(encoding="utf-8") == MEMORY.replace(
        "包管理器：pip", "包管理器：uv"
    )
    dynamic = daemon.call("context", {"workspace": ws, "query_text": "包管理器用什么"})["dynamic"]
    assert [q["question_id"] for q in dynamic["questions"]] == [language]
    run_id = out.stdout.split("run ")[1].split()[0]
    daemon.call("restore", {"workspace": ws, "run_id": run_id})
    assert (root / "memory" / "MEMORY.md").read_text(encoding="utf-8") == MEMORY

    out = daemon.memoryctl("--json", "answer", language, "old", cwd=root)
    assert json.loads(out.stdout)["data"] == {
        "question_id": language,
        "answer": "old",
        "applied": True,
        "writes": [],
    }  # run_id: absent (null), no file changed
    assert "questions" not in daemon.call("context", {"workspace": ws, "query_text": "x"})["dynamic"]
    assert daemon.call("context", {"workspace": ws})["dynamic"]["text"] == ""
    again = daemon.memoryctl("--json", "answer", language, "new", cwd=root)
    assert again.returncode == 1 and json.loads(again.stdout)["error"]["name"] == "MEMORY_QUESTION_NOT_FOUND"
    assert daemon.memoryctl("answer", "q_nothex", "new", cwd=root).returncode != 0  # refused before the call


def test_both_keeps_both_marked(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    language, _ = setup(root)
    result = daemon.call("answer", {"workspace": ws, "question_id": language, "answer": "both"})
    assert result["applied"] and result["writes"] == [{"path": "memory/MEMORY.md", "action": "update"}]
    text = (root / "memory" / "MEMORY.md").read_text(encoding="utf-8")
    assert "- Language: Python <!-- conflict: language -->\n- Language: Rust <!-- conflict: language -->\n" in text
    # the file is indexed after the change: the new bullet is searchable at once
    hits = daemon.call("search", {"workspace": ws, "query": "Rust", "mode": "bm25"})["hits"]
    assert any(h["path"] == "memory/MEMORY.md" for h in hits)


def test_a_hostile_questions_file_never_breaks_context(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    setup(root)
    path = root / questions.QUESTIONS_FILE
    path.unlink()
    os.mkfifo(path)  # a clone could ship one: reading it must not block
    assert "questions" not in daemon.call("context", {"workspace": ws, "query_text": "串口"})["dynamic"]
    path.unlink()
    outside = root.parent / f"{root.name}-outside.jsonl"
    outside.write_text(questions.QuestionRow(kind="asked", question_id="q_0123456789ab").model_dump_json() + "\n")
    path.symlink_to(outside)  # a symlink out of the workspace is not followed
    assert "questions" not in daemon.call("context", {"workspace": ws})["dynamic"]
    path.unlink()
    outside.unlink()
    path.write_text(
        "\n".join(
            questions.QuestionRow(
                kind="asked", question_id=f"q_{i:012x}", key="语言" * 40, old="旧" * 300, new="新" * 300
            ).model_dump_json()
            for i in range(5000)
        )
    )
    dynamic = daemon.call("context", {"workspace": ws})["dynamic"]
    assert len(dynamic["questions"]) == questions.SHOWN_MAX and len(dynamic["text"]) < 2000
