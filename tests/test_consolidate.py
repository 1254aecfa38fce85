"""Consolidation through the compile exchange, through the real daemon: daily notes → MEMORY.md, INSIGHTS.md,
HISTORY.md and today's daily file in one change; routing modes; the loss guard; restore; interruption safety."""

from __future__ import annotations

import json
import signal
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from memoryctl.rpc import ClientError, RemoteError

from tests.conftest import Daemon, daemon_env, short_tmp

TODAY = date.today().isoformat()


def remember(d: Daemon, ws: str, text: str, kind: str = "note") -> str:
    rid: str = d.call("remember", {"workspace": ws, "text": text, "type": kind})["id"]
    return rid


def prepare(d: Daemon, ws: str, **extra: Any) -> dict[str, Any]:
    result: dict[str, Any] = d.call("compile.prepare", {"workspace": ws, **extra})
    return result


def answer(request_id: str, **fields: Any) -> dict[str, Any]:
    return {"request_id": request_id, "provenance_summary": {"observation_ids_used": []}, **fields}


def apply(d: Daemon, ws: str, resp: dict[str, Any], **extra: Any) -> dict[str, Any]:
    result: dict[str, Any] = d.call("compile.apply", {"workspace": ws, "response": resp, **extra})
    return result


def rows(root: Path, name: str) -> list[dict[str, Any]]:
    path = root / "data/memory/observability" / name
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def history(root: Path) -> list[dict[str, Any]]:
    path = root / "data/memory/history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


DAILY = {
    "Topics": ["UART flow control on KX-200", "串口超时的原因"],
    "Decisions": ["use RTS/CTS above 115200 baud"],
    "Tool Activity": ["ran pytest tests/test_uart.py 3 times"],
    "Open Questions": ["does fw 1.3 still need it?"],
}


def test_a_consolidation_writes_every_target_in_one_change(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    (root / "memory").mkdir(exist_ok=True)
    memory = "# Memory\n\nKept as is.\n\n## Devices\n- KX-200 runs at 115200 baud\n\n## People\n- 张三 owns the bench\n"
    (root / "memory/MEMORY.md").write_text(memory)
    ids = [
        remember(daemon, ws, "decided: RTS/CTS for KX-200 above 115200", "decision"),
        remember(daemon, ws, "串口超时 again"),
    ]
    request = prepare(daemon, ws)
    assert request["request_id"] and request["entry_count"] == 2 and request["observation_count"] == 0
    material = request["request"]["consolidation"]
    assert [s["title"] for s in material["memory"]] == ["Devices", "People"]
    assert [n["item_id"] for n in material["daily_notes"]] == ids
    assert "memory_update" in request["request"]["instructions"]
    note = material["daily_notes"][0]["entry_id"]
    resp = answer(
        request["request_id"],
        memory_update=f"## Devices\n- KX-200 needs RTS/CTS above 115200 baud [evidence: {note}; confidence: 0.9]\n",
        daily_sections=DAILY,
        history_entry="Consolidated the UART notes\nof today",
        insights_update="## Debugging\n- 串口超时 came from missing flow control\n",
    )
    done = apply(daemon, ws, resp)
    assert done["applied"] and done["run_id"]
    text = (root / "memory/MEMORY.md").read_text()
    assert text.startswith(
        "# Memory\n\nKept as is.\n\n## Devices\n- KX-200 runs at 115200 baud\n- KX-200 needs RTS/CTS"
    )
    assert "## People\n- 张三 owns the bench" in text and "[evidence" not in text
    insights = (root / "memory/INSIGHTS.md").read_text()
    assert f"- 串口超时 came from missing flow control <!-- seen: {TODAY} -->" in insights
    assert (root / "memory/HISTORY.md").read_text().endswith("] Consolidated the UART notes of today\n")
    daily = (root / f"memory/{TODAY}.md").read_text()
    assert "— decision\n- Decisions: use RTS/CTS above 115200 baud" in daily and "- Topics: 串口超时的原因" in daily
    # one change, one history line of kind consolidate, listing every file
    entry = next(e for e in history(root) if e["run_id"] == done["run_id"])
    assert entry["kind"] == "consolidate" and entry["entries"] == 2 and entry["routing"] == "routed"
    paths = {c["path"] for c in entry["changes"]}
    assert {"memory/MEMORY.md", "memory/INSIGHTS.md", "memory/HISTORY.md", f"memory/{TODAY}.md"} <= paths
    assert {"data/memory/curated.jsonl", "data/memory/curate/consolidated.json"} <= paths
    # one outcome row per target, one routing row
    outcomes = {r["target"]: r for r in rows(root, "outcomes.jsonl")}
    assert set(outcomes) == {"memory", "insights", "daily", "history"}
    assert outcomes["memory"]["outcome"] == "written" and outcomes["memory"]["counts"]["added"] == 1
    assert all(r["run_id"] == done["run_id"] for r in outcomes.values())
    assert rows(root, "routing.jsonl") == [
        {
            "ts": rows(root, "routing.jsonl")[0]["ts"],
            "run_id": done["run_id"],
            "mode": "compatible",
            "result": "routed",
            "sections": 4,
        }
    ]
    # the bullet is an item: evidence, confidence, revision 1
    items = [json.loads(line) for line in (root / "data/memory/curated.jsonl").read_text().splitlines()]
    bullet = next(i for i in items if i["path"] == "memory/MEMORY.md")
    assert bullet["evidence"] == [note] and bullet["confidence"] == 0.9 and bullet["revision"] == 1
    # consolidated entries (and the ones it wrote) are not offered again
    assert prepare(daemon, ws).get("request_id") is None
    # the same response again changes nothing
    again = apply(daemon, ws, resp)
    assert again["already_applied"] and (root / "memory/MEMORY.md").read_text() == text
    assert len(rows(root, "outcomes.jsonl")) == 4


def _daemon(started: list[Daemon], **settings: str) -> tuple[Daemon, Path, str]:
    home = short_tmp()
    env = daemon_env(home)
    env.update({f"MEMORYD_{k.upper()}": v for k, v in settings.items()})
    d = Daemon(home, env)
    started.append(d)
    d.start()
    root = short_tmp("ws")
    return d, root, d.call("workspace.add", {"path": str(root)})["workspace_id"]


def _refused(d: Daemon, ws: str, resp: dict[str, Any]) -> RemoteError:
    with pytest.raises(RemoteError) as caught:
        apply(d, ws, resp)
    return caught.value


@pytest.mark.parametrize("mode", ["compatible", "preferred", "required"])
def test_routing_modes_on_missing_and_broken_daily_sections(started: list[Daemon], mode: str) -> None:
    d, root, ws = _daemon(started, curate_routing_mode=mode)
    remember(d, ws, "串口超时 on bench-2")
    request = prepare(d, ws)
    assert request["request"]["consolidation"]["routing_mode"] == mode
    missing = answer(request["request_id"], history_entry="bench-2 timeouts")
    if mode == "compatible":
        assert apply(d, ws, missing)["consolidation"]["routing"]["result"] == "fallback"
        assert "- bench-2 timeouts" in (root / f"memory/{TODAY}.md").read_text()
        return
    error = _refused(d, ws, missing)
    assert error.name == "MEMORY_DAILY_SECTIONS_REQUIRED" and error.data["mode"] == mode
    assert not (root / "memory/HISTORY.md").exists()  # nothing written
    assert rows(root, "routing.jsonl")[-1]["result"] == "rejected"
    # handed out again, the request says why its last answer was refused
    again = prepare(d, ws)
    assert again["request_id"] == request["request_id"] and again["resumed"]
    assert again["request"]["consolidation"]["retry"] == "daily_sections is missing"
    broken = answer(request["request_id"], history_entry="bench-2 timeouts", daily_sections={"Topics": "one string"})
    if mode == "required":
        assert _refused(d, ws, broken).data["reason"] == "daily_sections.Topics is not a list of strings"
        valid = answer(request["request_id"], daily_sections={"Topics": ["bench-2"]})
        assert apply(d, ws, valid)["consolidation"]["routing"]["result"] == "routed"
    else:  # preferred: one retry, then the fallback
        assert apply(d, ws, broken)["consolidation"]["routing"]["result"] == "fallback"
    assert [r["result"] for r in rows(root, "routing.jsonl")] == [
        "rejected",
        "rejected" if mode == "required" else "fallback",
    ] + (["routed"] if mode == "required" else [])


def test_compatible_without_a_history_entry_writes_no_daily_entry(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    _root, ws = workspace
    remember(daemon, ws, "note one")
    done = apply(daemon, ws, answer(prepare(daemon, ws)["request_id"], daily_sections=["not", "an", "object"]))
    assert done["consolidation"]["routing"]["result"] == "invalid"
    assert done["consolidation"]["targets"]["daily"]["outcome"] == "no_change"


def test_replace_is_explicit_and_held_where_the_model_did_not_see_the_section(started: list[Daemon]) -> None:
    # a request shows at most 60 characters of MEMORY.md: section A (20 bullets) is not shown whole
    d, root, ws = _daemon(started, consolidate_memory_chars="60", curate_max_update_bytes="400")
    (root / "memory").mkdir(exist_ok=True)
    bullets = "".join(f"- fact {n}\n" for n in range(20))
    original = f"## B\n- b1\n- b2\n\n## A\n{bullets}"
    (root / "memory/MEMORY.md").write_text(original)
    remember(d, ws, "b2 is wrong")
    request = prepare(d, ws)
    assert request["request"]["consolidation"]["memory_truncated"]
    # a [replace] of a section the model saw only part of would drop bullets it never saw: held, nothing written
    held = _refused(d, ws, answer(request["request_id"], memory_update="## A [replace]\n- fact 0\n"))
    assert held.name == "MEMORY_GUARD_HELD" and held.data["held"][0]["outcome"] == "truncated_skip"
    # an update too large to look at is skipped whole (curate_max_update_bytes), held too
    huge = "## B\n" + "".join(f"- bullet {n}\n" for n in range(100))
    assert _refused(d, ws, answer(request["request_id"], memory_update=huge)).data["held"][0]["outcome"] == (
        "truncated_skip"
    )
    assert [r["outcome"] for r in rows(root, "outcomes.jsonl") if r["target"] == "memory"] == ["truncated_skip"] * 2
    assert (root / "memory/MEMORY.md").read_text() == original
    # an explicit [replace] of a section shown whole: only its bullets change, the rest byte for byte
    done = apply(d, ws, answer(request["request_id"], memory_update="## B [replace]\n- b1\n- b3 (was b2)\n"))
    assert done["consolidation"]["targets"]["memory"]["counts"]["removed"] == 1
    assert (root / "memory/MEMORY.md").read_text() == f"## B\n- b1\n- b3 (was b2)\n\n## A\n{bullets}"
    items = [json.loads(line) for line in (root / "data/memory/curated.jsonl").read_text().splitlines()]
    assert [i["first_line"] for i in items] == ["b3 (was b2)"]  # b2 was a person's, not an item of ours


def test_a_preference_conflict_is_asked_and_shown_next_time(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    (root / "memory").mkdir(exist_ok=True)
    (root / "memory/MEMORY.md").write_text("## Preferences\n- language: 中文\n")
    remember(daemon, ws, "user wrote in English today")
    request = prepare(daemon, ws)
    done = apply(daemon, ws, answer(request["request_id"], memory_update="## Preferences\n- language: English\n"))
    assert done["consolidation"]["targets"]["memory"]["outcome"] == "no_change"  # ask_user: the old one stays
    assert (root / "memory/MEMORY.md").read_text() == "## Preferences\n- language: 中文\n"
    remember(daemon, ws, "another note")
    questions = prepare(daemon, ws)["request"]["consolidation"]["open_questions"]
    assert any("language" in q and "English" in q for q in questions)


def test_restore_of_a_consolidation_is_byte_identical_and_reoffers_its_notes(
    daemon: Daemon, workspace: tuple[Path, str]
) -> None:
    root, ws = workspace
    (root / "memory").mkdir(exist_ok=True)
    (root / "memory/MEMORY.md").write_bytes("## 设备\r\n- KX-200\r\n".encode())  # CRLF, Chinese: kept as bytes
    remember(daemon, ws, "KX-200 needs RTS/CTS")
    before = {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file()
        and "memory/" in p.as_posix()
        and "observability" not in p.as_posix()
        and "compile" not in p.as_posix()
        and "history.jsonl" not in p.as_posix()
        and "curate/progress" not in p.as_posix()
    }
    request = prepare(daemon, ws)
    done = apply(
        daemon,
        ws,
        answer(
            request["request_id"],
            memory_update="## 设备\n- KX-200 需要 RTS/CTS\n",
            daily_sections={"Decisions": ["RTS/CTS"]},
            history_entry="flow control",
            insights_update="## UART\n- check flow control first\n",
        ),
    )
    assert prepare(daemon, ws).get("request_id") is None
    restored = daemon.call("restore", {"workspace": ws, "run_id": done["run_id"]})
    after = {k: (root / k).read_bytes() for k in before}
    assert after == before
    for rel in ("memory/INSIGHTS.md", "memory/HISTORY.md", "data/memory/curated.jsonl"):
        assert not (root / rel).exists()
    # the notes are unconsolidated again: offered by the next prepare
    assert prepare(daemon, ws)["entry_count"] == 1
    # and the restore is a change too: restoring it redoes the consolidation
    daemon.call("restore", {"workspace": ws, "run_id": restored["run_id"]})
    assert "- KX-200 需要 RTS/CTS" in (root / "memory/MEMORY.md").read_text()


def _progress(root: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((root / "data/memory/curate/progress.json").read_text())
    return data


def _consolidated(root: Path) -> set[str]:
    path = root / "data/memory/curate/consolidated.json"
    if not path.exists():
        return set()
    return {i for ids in json.loads(path.read_text())["files"].values() for i in ids}


def _notes(request: dict[str, Any]) -> set[str]:
    return {n["entry_id"] for n in request["request"]["consolidation"]["daily_notes"]}


def _answer_chunk(request: dict[str, Any]) -> dict[str, Any]:
    notes = request["request"]["consolidation"]["daily_notes"]
    bullets = "".join(f"- {n['text'][2:]} [evidence: {n['entry_id']}]\n" for n in notes)
    chunk = request["chunk"]["index"]
    return answer(
        request["request_id"],
        memory_update=f"## Notes\n{bullets}",
        daily_sections={"Topics": [f"chunk {chunk}"]},
        history_entry=f"chunk {chunk}",
    )


@pytest.mark.e2e
@pytest.mark.parametrize("step", ["backups", "write"])
def test_a_daemon_killed_between_chunks_resumes_at_the_first_unfinished_one(started: list[Daemon], step: str) -> None:
    d, root, ws = _daemon(started, consolidate_entries_per_chunk="2")
    for n in range(5):
        remember(d, ws, f"note {n} 串口")
    first = prepare(d, ws)
    assert first["chunk"]["of"] == 3 and first["entry_count"] == 2 and first["remaining"] == 2
    # the progress record is on disk before the host sees the chunk
    assert _progress(root)["chunks"][first["request_id"]]["status"] == "handed_out"
    apply(d, ws, _answer_chunk(first))
    assert _progress(root)["chunks"][first["request_id"]]["status"] == "applied"
    assert _notes(first) <= _consolidated(root)
    second = prepare(d, ws)
    assert second["chunk"]["index"] == 2
    d.stop(signal.SIGKILL)  # killed between chunks: chunk 2 handed out, not answered
    d.start()
    again = prepare(d, ws)
    assert again["request_id"] == second["request_id"] and again["resumed"]
    assert [n["entry_id"] for n in again["request"]["consolidation"]["daily_notes"]] == [
        n["entry_id"] for n in second["request"]["consolidation"]["daily_notes"]
    ]
    # killed while applying chunk 2 (MEMORYD_CRASH_AT: before its commit point, or after its first file)
    d.stop()
    d.env["MEMORYD_CRASH_AT"] = step
    d.start()
    resp = _answer_chunk(again)
    with pytest.raises(ClientError):
        apply(d, ws, resp)
    assert d.proc is not None and d.proc.wait(10) == 86
    d.stop()
    del d.env["MEMORYD_CRASH_AT"]
    d.start()  # recovery: rolled forward (write) or never happened (backups)
    d.call("status", {"workspace": ws})  # answers once the workspace's rules are open: recovery is done
    memory = (root / "memory/MEMORY.md").read_text()
    if step == "backups":  # nothing of chunk 2 is written, so nothing of it is marked
        assert "note 2" not in memory and not _notes(second) & _consolidated(root)
        assert prepare(d, ws)["request_id"] == second["request_id"]
        apply(d, ws, resp)
    else:  # its files are all there and its entries marked, in the same change
        assert "note 2 串口" in memory and "note 3 串口" in memory and _notes(second) <= _consolidated(root)
        assert apply(d, ws, resp)["already_applied"]
    third = prepare(d, ws)
    assert third["chunk"]["index"] == 3 and third["entry_count"] == 1
    apply(d, ws, _answer_chunk(third))
    memory = (root / "memory/MEMORY.md").read_text()
    assert [line for line in memory.splitlines() if line.startswith("- note")] == [f"- note {n} 串口" for n in range(5)]
    assert prepare(d, ws).get("request_id") is None
    assert [e["kind"] for e in history(root) if e.get("kind")] == ["consolidate"] * 3


def test_remember_keeps_confidence_evidence_and_metadata_with_its_item(
    daemon: Daemon, workspace: tuple[Path, str]
) -> None:
    root, ws = workspace
    oid = daemon.call("observe", {"workspace": ws, "kind": "log", "text": "串口超时", "source": "pytest"})[
        "observation_id"
    ]
    params = {"confidence": 0.6, "evidence": [oid], "metadata": {"source": "review", "标签": ["串口"]}}
    wired = daemon.call("remember", {"workspace": ws, "text": "UART timeouts come from flow control", **params})
    out = daemon.memoryctl(
        "remember", "second", "--confidence", "0.4", "--evidence", oid, "--metadata", '{"k": 1}', cwd=root
    )
    assert out.returncode == 0, out.stderr
    plain = daemon.call("remember", {"workspace": ws, "text": "third"})
    lines = {i["id"]: i for i in map(json.loads, (root / "data/memory/items.jsonl").read_text().splitlines())}
    assert {k: lines[wired["id"]][k] for k in params} == params and lines[wired["id"]]["revision"] == 1
    cli = next(i for i in lines.values() if i["first_line"] == "- second")
    assert (cli["confidence"], cli["evidence"], cli["metadata"]) == (0.4, [oid], {"k": 1})
    assert (lines[plain["id"]]["confidence"], lines[plain["id"]]["evidence"]) == (1.0, [])
    for bad in ({"confidence": 1.5}, {"metadata": {"a": "x" * 9000}}, {"evidence": ["x" * 201]}):
        with pytest.raises(RemoteError) as caught:
            daemon.call("remember", {"workspace": ws, "text": "bad", **bad})
        assert caught.value.name == "INVALID_PARAMS"
    bad_cli = daemon.memoryctl("remember", "x", "--metadata", "[1]", cwd=root)
    assert bad_cli.returncode == 2 and "JSON object" in bad_cli.stderr


def test_memoryctl_consolidate_prepares_and_applies_answers_in_order(started: list[Daemon]) -> None:
    d, root, ws = _daemon(started, consolidate_entries_per_chunk="1")
    for n in range(3):
        remember(d, ws, f"决定 {n}: keep it")
    out = d.memoryctl("consolidate", "--out", str(root / "request.json"), cwd=root)
    assert out.returncode == 0, out.stderr
    assert "daily notes   1" in out.stdout and "chunk         1/3" in out.stdout
    first = json.loads((root / "request.json").read_text())
    answers: list[tuple[Path, dict[str, Any]]] = []
    for n in range(3):
        if n:
            apply(d, ws, answers[-1][1])  # the host answers chunk by chunk
        request = first if n == 0 else prepare(d, ws)
        resp = answer(
            request["request_id"],
            memory_update=f"## 决定\n- 决定 {n}\n",
            daily_sections={"Decisions": [f"决定 {n}"]},
        )
        path = root / f"answer{n}.json"
        path.write_text(json.dumps(resp, ensure_ascii=False))
        answers.append((path, resp))
    # the first two already applied above; --apply applies the last and says the others were
    done = d.memoryctl("consolidate", "--apply", *(str(p) for p, _ in answers), cwd=root)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("was already applied") == 2 and "memory    written" in done.stdout
    assert "3/3" in done.stderr  # the progress line
    assert (root / "memory/MEMORY.md").read_text() == "## 决定\n- 决定 0\n- 决定 1\n- 决定 2\n"
    nothing = d.memoryctl("consolidate", cwd=root)
    assert "nothing to consolidate" in nothing.stdout
    bad = d.memoryctl("consolidate", "--dry-run", cwd=root)
    assert bad.returncode == 2
    as_json = d.memoryctl("consolidate", "--apply", str(answers[0][0]), "--json", cwd=root)
    assert json.loads(as_json.stdout)["data"]["applied"][0]["already_applied"]


def test_the_replay_check_holds_a_consolidation_that_loses_a_recalled_answer(
    daemon: Daemon, workspace: tuple[Path, str]
) -> None:
    from memoryd.curate.trace import line_digest

    root, ws = workspace
    (root / "memory").mkdir(exist_ok=True)
    memory = "## UART\n- 串口超时: enable RTS/CTS above 115200 baud\n- bench-3 cable is flaky\n"
    (root / "memory/MEMORY.md").write_text(memory)
    (root / "data/memory/observability").mkdir(parents=True)
    row = {
        "ts": "2026-01-01T00:00:00.000Z",
        "query": "串口超时 怎么办 RTS/CTS",
        "answers": [
            {
                "path": "memory/MEMORY.md",
                "start_line": 2,
                "item_id": None,
                "digests": [line_digest("- 串口超时: enable RTS/CTS above 115200 baud")],
            }
        ],
    }
    (root / "data/memory/observability/replay.jsonl").write_text(json.dumps(row, ensure_ascii=False) + "\n")
    remember(daemon, ws, "bench-3 cable replaced")
    request = prepare(daemon, ws)
    # a [replace] that drops the recalled answer: held, with the prompt and the place it named
    lose = answer(request["request_id"], memory_update="## UART [replace]\n- bench-3 cable replaced\n")
    held = _refused(daemon, ws, lose)
    assert held.name == "MEMORY_GUARD_HELD" and held.data["lost"][0]["path"] == "memory/MEMORY.md"
    assert held.data["lost"][0]["query"] == row["query"]
    assert (root / "memory/MEMORY.md").read_text() == memory
    # keeping it passes
    keep = answer(
        request["request_id"],
        memory_update="## UART [replace]\n- 串口超时: enable RTS/CTS above 115200 baud\n- bench-3 cable replaced\n",
    )
    assert apply(daemon, ws, keep)["consolidation"]["counters"]["replay"]["checked"] == 1


def test_compact_summarizes_archived_days_into_history_as_one_restorable_change(
    daemon: Daemon, workspace: tuple[Path, str]
) -> None:
    root, ws = workspace
    archive = root / "memory/archive"
    archive.mkdir(parents=True)
    for day in ("2026-01-02", "2026-01-03"):
        (archive / f"{day}.md").write_text(f"## {day}\n\n## {day} 10:00 — decision\n- 串口 decision of {day}\n")
    (archive / "2026-11-20.md").write_text("## 2026-11-20\n\n## 2026-11-20 10:00 — note\n- too recent\n")
    params = {"workspace": ws, "older_than_days": 30, "now": "2026-11-25"}
    dry = daemon.call("lifecycle.compact", {**params, "dry_run": True})
    assert dry["dry_run"] and [f["path"] for f in dry["files"]] == [
        "memory/archive/2026-01-02.md",
        "memory/archive/2026-01-03.md",
    ]
    assert dry.get("request_id") is None and not (root / "memory/HISTORY.md").exists()
    cli = daemon.memoryctl("compact", "--older-than-days", "30", "--dry-run", cwd=root)
    assert "would compact 2 archived file(s)" in cli.stdout, cli.stderr
    started_ = daemon.call("lifecycle.compact", params)
    request = json.loads((root / started_["path"]).read_text())
    assert request["consolidation"]["compact"] == [f["path"] for f in dry["files"]]
    assert len(request["consolidation"]["daily_notes"]) == 2 and "COMPACTS" in request["instructions"]
    # an answer without the history line it exists for is refused
    with pytest.raises(RemoteError) as caught:
        apply(daemon, ws, answer(started_["request_id"]))
    assert caught.value.name == "MEMORY_COMPILE_INVALID"
    done = apply(daemon, ws, answer(started_["request_id"], history_entry="January: UART decisions"))
    history_md = (root / "memory/HISTORY.md").read_text()
    assert history_md.endswith("(archive 2026-01-02 … 2026-01-03) January: UART decisions\n")
    entry = next(e for e in history(root) if e["run_id"] == done["run_id"])
    assert entry["kind"] == "compact" and entry["files"] == [f["path"] for f in dry["files"]]
    rows_ = [r for r in rows(root, "lifecycle.jsonl") if r["action"] == "compact"]
    assert [(r["dry_run"], r["files"]) for r in rows_] == [(True, 2), (True, 2), (False, 2)]  # API, CLI, apply
    # compacted days are not offered again; the archived files are left as they were
    assert daemon.call("lifecycle.compact", params)["files"] == []
    assert (archive / "2026-01-02.md").exists()
    daemon.call("restore", {"workspace": ws, "run_id": done["run_id"]})
    assert not (root / "memory/HISTORY.md").exists()
    assert len(daemon.call("lifecycle.compact", {**params, "dry_run": True})["files"]) == 2


def test_crafted_consolidation_files_never_crash_hang_or_escape(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    import os

    root, ws = workspace
    remember(daemon, ws, "a note")
    curate = root / "data/memory/curate"
    curate.mkdir(parents=True)
    # progress.json a FIFO, then garbage: read as no progress (it only says where a batch stood)
    os.mkfifo(curate / "progress.json")
    assert prepare(daemon, ws)["entry_count"] == 1
    (curate / "progress.json").unlink()
    (curate / "progress.json").write_text('{"chunks": {"../../x": 1}}')
    assert prepare(daemon, ws)["resumed"]
    # consolidated.json naming a path outside the daily files: refused with a hint, nothing guessed
    (curate / "consolidated.json").write_text(json.dumps({"files": {"../../etc/passwd": ["dn_" + "0" * 20]}}))
    with pytest.raises(RemoteError) as caught:
        prepare(daemon, ws, restart=True)
    assert caught.value.name == "MEMORY_FILE_REFUSED" and "consolidated.json" in caught.value.hint
    (curate / "consolidated.json").unlink()
    # a compile state whose request names an entry outside memory/: the state is refused, never read through
    state_file = root / "data/memory/compile/state.json"
    crafted = json.loads(state_file.read_text())
    record = next(iter(crafted["requests"].values()))
    record["entries"] = ["../../../etc/passwd#dn_" + "0" * 20]
    state_file.write_text(json.dumps(crafted))
    with pytest.raises(RemoteError) as caught:
        prepare(daemon, ws)
    assert caught.value.name == "MEMORY_FILE_REFUSED"
    state_file.unlink()
    # a daily file that is a FIFO or a symlink out of the workspace is skipped, the others offered
    os.mkfifo(root / "memory/2000-01-01.md")
    outside = short_tmp("out") / "secret.md"
    outside.write_text("## 2000-01-02 10:00 — note\n- secret outside\n")
    os.symlink(outside, root / "memory/2000-01-02.md")
    request = prepare(daemon, ws, since="1999-01-01")
    texts = [n["text"] for n in request["request"]["consolidation"]["daily_notes"]]
    assert texts == ["- a note"]
