"""curate.guard, curate.conflicts, curate.outcomes, curate.questions: the loss guard and the size cap; preference
conflicts found on configurable keys (Chinese keys and full-width colons) and settled four ways; outcome, sanitize
and question rows appended whole, bounded, readable back from hostile files; and no secret in any file written,
any row or any log line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pydantic import ValidationError
from structlog.testing import capture_logs

from memoryd.curate import conflicts, outcomes, questions
from memoryd.curate.guard import loss_guard, size_guard
from memoryd.curate.sanitize import sanitize
from memoryd.errors import AppError
from memoryd.rules import journal
from memoryd.settings import CurateSettings
from tests.test_curate_sanitize import SECRETS

POLICY = CurateSettings()

CURRENT = """# 项目长期记忆

## 偏好
- Language: Python
- 包管理器：pip
- **indent** = 4 spaces
- 沟通风格: 简洁
- other: x

## 约定
- 串口波特率固定为 921600
"""

UPDATE = """## 偏好
- language: Rust
- 包管理器: uv
  (since March)
- indent = 4 spaces
- 沟通风格: 简洁。
## 工具
- preferred_language: 中文
"""


# --- guard ------------------------------------------------------------------------------------------------------


def test_the_loss_guard_holds_more_than_the_share_without_replace() -> None:
    assert loss_guard(100, 10, False, POLICY).ok  # 10% is not more than 10%
    held = loss_guard(100, 11, False, POLICY)
    assert not held.ok and held.outcome == "guard_rejected" and held.share == pytest.approx(0.11)
    assert held.reason == "would remove 11 of 100 bullets (11%), over curate_max_loss_share (10%) without [replace]"
    passed = loss_guard(100, 60, True, POLICY)
    assert passed.ok and passed.outcome is None and passed.reason == "[replace] removes 60 of 100 bullets (60%)"
    assert loss_guard(100, 0, True, POLICY).reason is None
    assert loss_guard(0, 0, False, POLICY) == loss_guard(0, 5, False, POLICY)  # nothing to lose
    assert not loss_guard(3, 1, False, CurateSettings(max_loss_share=0)).ok
    assert loss_guard(3, 3, False, CurateSettings(max_loss_share=1)).ok
    with pytest.raises(ValueError, match="negative"):
        loss_guard(3, -1, False, POLICY)


def test_the_size_cap_skips_a_huge_update_whole() -> None:
    assert size_guard("## 约定\n- 一条\n", POLICY).ok
    big = size_guard("## 大\n- " + "串" * 3_500_000, POLICY)  # 10 MB of UTF-8
    assert not big.ok and big.outcome == "truncated_skip"
    assert big.reason == "update of 10.0 MiB is over curate_max_update_bytes (256.0 KiB)"
    edge = "x" * POLICY.max_update_bytes
    assert size_guard(edge, POLICY).ok and not size_guard(edge + "é", POLICY).ok


# --- conflicts -------------------------------------------------------------------------------------------------


def test_conflicts_are_found_on_the_configured_keys_only() -> None:
    found = conflicts.find_conflicts(CURRENT, UPDATE, POLICY)
    assert [(c.key, c.old, c.new, c.old_line, c.new_line) for c in found] == [
        ("language", "Python", "Rust", 4, 2),
        ("包管理器", "pip", "uv", 5, 3),
    ]  # indent: same value; 沟通风格: same but for end punctuation; preferred_language: another key
    assert all(c.resolution == "ask_user" for c in found)
    only = CurateSettings(conflict_keys=("包管理*",))
    assert [c.key for c in conflicts.find_conflicts(CURRENT, UPDATE, only)] == ["包管理器"]
    assert conflicts.find_conflicts(CURRENT, "## x\n```\n- language: Go\n```\n", POLICY) == []
    assert conflicts.find_conflicts("", UPDATE, POLICY) == []  # nothing to conflict with


def test_each_resolution() -> None:
    def settle(how: str) -> conflicts.Resolved:
        policy = CurateSettings(conflict_resolution=how)  # type: ignore[arg-type]
        return conflicts.resolve(CURRENT, UPDATE, conflicts.find_conflicts(CURRENT, UPDATE, policy))

    kept = UPDATE.replace("- language: Rust\n- 包管理器: uv\n  (since March)\n", "")
    old = settle("keep_old")
    assert old.current == CURRENT and old.update == kept and old.asked == []
    new = settle("keep_new")
    assert new.current == CURRENT.replace("- Language: Python", "- language: Rust").replace(
        "- 包管理器：pip", "- 包管理器: uv"
    )
    assert new.update == kept
    both = settle("merge")
    assert "- Language: Python <!-- conflict: language -->\n" in both.current
    assert "- language: Rust <!-- conflict: language -->\n- 包管理器: uv <!-- conflict: 包管理器 -->\n" in both.update
    asked = settle("ask_user")
    assert (
        asked.current == CURRENT and asked.update == kept and [c.key for c in asked.asked] == ["language", "包管理器"]
    )
    again = conflicts.resolve(both.current, both.update, [])  # marking is not repeated
    assert again.current == both.current


def test_resolution_keeps_crlf_and_every_other_byte() -> None:
    current = CURRENT.replace("\n", "\r\n")
    policy = CurateSettings(conflict_resolution="keep_new")
    resolved = conflicts.resolve(current, UPDATE, conflicts.find_conflicts(current, UPDATE, policy))
    assert resolved.current == current.replace("- Language: Python", "- language: Rust").replace(
        "- 包管理器：pip", "- 包管理器: uv"
    )


def test_hostile_preference_lines() -> None:
    long_value = "- language: " + "x" * 100_000
    many = "## 偏好\n" + "".join(f"- language: v{i}\n" for i in range(20_000))
    assert conflicts.find_conflicts(CURRENT, long_value, POLICY) == []  # too long to be a preference
    found = conflicts.find_conflicts(CURRENT, many, POLICY)
    assert len(found) == 20_000 and found[-1].new == "v19999"
    assert conflicts.preferences("- language" + " " * 50_000 + ": x", POLICY.conflict_keys) == []


# --- outcome and sanitize rows ---------------------------------------------------------------------------------


def read_rows(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_outcome_and_sanitize_rows_are_appended_whole(tmp_path: Path) -> None:
    counts = outcomes.OutcomeCounts(bullets_before=40, bullets_after=42, added=2, duplicates=1, sanitized=3)
    outcomes.record(tmp_path, outcomes.OutcomeRow(run_id="apply_1", target="memory", outcome="written", counts=counts))
    outcomes.record(
        tmp_path,
        outcomes.OutcomeRow(run_id="apply_2", target="insights", outcome="guard_rejected", reason="would remove …"),
    )
    result = sanitize(f"## 约定\n- {SECRETS['aws']}\n- 2026-01-01\n", POLICY)
    outcomes.record_sanitize(tmp_path, outcomes.SanitizeRow(run_id="apply_1", target="memory", dropped=result.counts()))
    rows = read_rows(tmp_path / outcomes.OUTCOMES_FILE)
    assert [r["outcome"] for r in rows] == ["written", "guard_rejected"]
    assert set(rows[0]) == {"ts", "run_id", "target", "outcome", "reason", "counts"}
    assert rows[0]["counts"] == {
        "bullets_before": 40,
        "bullets_after": 42,
        "added": 2,
        "removed": 0,
        "duplicates": 1,
        "sanitized": 3,
    }
    assert str(rows[0]["ts"]).endswith("Z") and rows[0]["reason"] is None
    (sanitized,) = read_rows(tmp_path / outcomes.SANITIZE_FILE)
    assert sanitized["dropped"] == {
        "secret": 1,
        "url": 0,
        "date_line": 1,
        "too_long": 0,
        "duplicate": 0,
        "private": 0,
        "empty_section": 1,
    }


def test_rows_refuse_bad_values_and_withhold_a_secret_reason(tmp_path: Path) -> None:
    for bad in ({"run_id": "../x"}, {"target": "elsewhere"}, {"outcome": "maybe"}, {"extra": 1}):
        with pytest.raises(ValidationError):
            outcomes.OutcomeRow.model_validate({"run_id": "r1", "target": "memory", "outcome": "written", **bad})
    with pytest.raises(ValidationError):
        outcomes.OutcomeCounts(added=-1)
    row = outcomes.OutcomeRow(
        run_id="r1", target="memory", outcome="no_change", reason=f"x {SECRETS['openai']} <private>p</private>"
    )
    assert row.reason == "(reason withheld: it looked like a secret)"
    assert outcomes.OutcomeRow(run_id="r1", target="memory", outcome="no_change", reason="a" * 9000).reason == (
        "a" * outcomes.REASON_MAX
    )


def test_rows_never_follow_a_symlinked_observability_dir(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "ws"
    (root / "data" / "memory").mkdir(parents=True)
    os.symlink(outside, root / outcomes.OBSERVABILITY_DIR)
    with pytest.raises(OSError):
        outcomes.record(root, outcomes.OutcomeRow(run_id="r1", target="memory", outcome="written"))
    assert list(outside.iterdir()) == []


# --- questions -------------------------------------------------------------------------------------------------


def asked(root: Path, update: str = UPDATE) -> list[str]:
    found = conflicts.find_conflicts(CURRENT, update, POLICY)
    return questions.ask(root, "apply_1", "memory", conflicts.resolve(CURRENT, update, found).asked)


def test_questions_are_asked_once_and_listed_until_answered(tmp_path: Path) -> None:
    ids = asked(tmp_path)
    assert len(ids) == 2 and all(i.startswith("q_") for i in ids)
    assert asked(tmp_path) == []  # the same conflicts again: nothing new
    open_ = questions.open_questions(tmp_path)
    assert [(q.key, q.old, q.new) for q in open_] == [("language", "Python", "Rust"), ("包管理器", "pip", "uv")]
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "MEMORY.md").write_text(CURRENT, encoding="utf-8")
    wr = tmp_path
    done = questions.answer(wr, ids[0], "old")
    assert (done.run_id, done.applied) == (None, True)
    assert (tmp_path / "memory" / "MEMORY.md").read_text(encoding="utf-8") == CURRENT
    assert [q.key for q in questions.open_questions(tmp_path)] == ["包管理器"]
    with pytest.raises(AppError) as caught:
        questions.answer(wr, ids[0], "new")
    assert caught.value.name == "MEMORY_QUESTION_NOT_FOUND"
    assert asked(tmp_path) == []  # answered: not asked again


@pytest.mark.parametrize("choice", ["new", "both"])
def test_an_answer_is_one_recorded_change_restore_can_undo(tmp_path: Path, choice: str) -> None:
    (tmp_path / "memory").mkdir()
    memory = tmp_path / "memory" / "MEMORY.md"
    memory.write_text(CURRENT, encoding="utf-8")
    qid = asked(tmp_path)[1]  # 包管理器: pip → uv
    done = questions.answer(tmp_path, qid, choice)  # type: ignore[arg-type]
    text = memory.read_text(encoding="utf-8")
    if choice == "new":
        assert text == CURRENT.replace("- 包管理器：pip", "- 包管理器：uv")
    else:
        assert "- 包管理器：pip <!-- conflict: 包管理器 -->\n- 包管理器：uv <!-- conflict: 包管理器 -->\n" in text
    assert done.applied and done.path == "memory/MEMORY.md" and done.run_id
    (entry,) = [e for e in journal.read_history(tmp_path) if e.run_id == done.run_id]
    assert entry.op == "answer" and entry.changes[0].path == "memory/MEMORY.md"
    assert questions.open_questions(tmp_path)[0].key == "language"


def test_an_answer_whose_bullet_was_edited_away_only_closes_the_question(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()
    memory = tmp_path / "memory" / "MEMORY.md"
    qid = asked(tmp_path)[0]
    memory.write_text("## 偏好\n- language: Go\n", encoding="utf-8")
    done = questions.answer(tmp_path, qid, "new")
    assert (
        not done.applied and done.run_id is None and memory.read_text(encoding="utf-8") == "## 偏好\n- language: Go\n"
    )
    assert [q.key for q in questions.open_questions(tmp_path)] == ["包管理器"]


def test_hostile_question_files(tmp_path: Path) -> None:
    path = tmp_path / questions.QUESTIONS_FILE
    path.parent.mkdir(parents=True)
    good = questions.QuestionRow(kind="asked", question_id="q_0123456789ab", key="语言", old="中文", new="English")
    lines = [
        b"{torn",
        b"[]",
        b'{"kind": "asked", "question_id": "../../etc"}',
        b"\xff\xfe",
        json.dumps({**good.model_dump(), "old": "x" * 10_000}).encode(),
        good.model_dump_json().encode(),
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert [q.question_id for q in questions.open_questions(tmp_path)] == ["q_0123456789ab"]
    # larger than READ_MAX_BYTES: its last READ_MAX_BYTES are read
    path.write_bytes(b"x" * (questions.READ_MAX_BYTES + 10) + b"\n" + good.model_dump_json().encode() + b"\n")
    assert len(questions.open_questions(tmp_path)) == 1
    path.unlink()
    os.mkfifo(path)
    with capture_logs() as logs:
        assert questions.open_questions(tmp_path) == []
    assert logs[0]["event"] == "questions_unreadable"


def test_no_secret_reaches_any_file_row_or_log(tmp_path: Path) -> None:
    """An update full of secrets (also split, in a key block, in a preference value, in <private>) through
    sanitize, conflicts, questions and every row: no file under the workspace and no log line holds any."""
    split = SECRETS["anthropic"]
    update = (
        "## 偏好\n"
        + "".join(f"- fact {name}: {value}\n" for name, value in SECRETS.items())
        + f"- language: {SECRETS['slack']}\n- 包管理器: uv <private>{SECRETS['google']}</private>\n"
        + f"- split {split[:15]}\n  {split[15:]}\n-----BEGIN PRIVATE KEY-----\nMIIBVQIBADANBgkq\n-----END PRIVATE KEY-----\n"
    )
    with capture_logs() as logs:
        clean = sanitize(update, POLICY)
        found = conflicts.find_conflicts(CURRENT, clean.text, POLICY)
        resolved = conflicts.resolve(CURRENT, clean.text, found)
        ids = questions.ask(tmp_path, "apply_9", "memory", resolved.asked)
        outcomes.record_sanitize(
            tmp_path, outcomes.SanitizeRow(run_id="apply_9", target="memory", dropped=clean.counts())
        )
        outcomes.record(
            tmp_path,
            outcomes.OutcomeRow(run_id="apply_9", target="memory", outcome="sanitize_modified", reason=update),
        )
        # a conflict carrying a secret value (were it ever fed unsanitized) is never asked
        raw = conflicts.resolve(CURRENT, update, conflicts.find_conflicts(CURRENT, update, POLICY))
        assert ids == [questions.question_id("包管理器", "pip", "uv")]
        assert questions.ask(tmp_path, "apply_9", "memory", raw.asked) == []
        assert [q.key for q in questions.open_questions(tmp_path)] == ["包管理器"]
    written = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    assert written and b"MIIBVQ" not in written
    everything = written.decode() + json.dumps(logs, ensure_ascii=False) + resolved.update + repr(clean)
    for name, secret in [*SECRETS.items(), ("split-head", split[:15]), ("split-tail", split[15:])]:
        assert secret not in everything, name
