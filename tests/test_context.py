"""context through the real daemon: the stable part (rules + MEMORY.md, deterministic, within a budget, snapshotted
per session across restarts, expiring), the dynamic part (recall, recent daily notes on a past-reference prompt),
hostile session ids, Chinese, memoryctl context, and the trigger's measured precision and recall."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from memoryctl.rpc import RemoteError

from memoryd.config import SettingsError, load_settings
from memoryd.context import render
from memoryd.context.service import WORDS_ONLY_SHARE
from memoryd.context.trigger import asks_about_past
from memoryd.settings import ContextSettings
from tests.conftest import Daemon, daemon_env, short_tmp, wait_for
from tests.context_prompts import PROMPTS
from tests.test_rules import compiled, observe, rule

MEMORY = """# 项目长期记忆

## 约定
- 串口波特率固定为 921600，必须开 RTS/CTS 流控
- jobs store 放在 ~/.config/msgcode/cron/jobs.json

## Build
- `make test` runs lint, types and the unit tests
- Never edit generated schemas by hand: `make schemas`
"""


def context(d: Daemon, ws: str, **params: Any) -> dict[str, Any]:
    result: dict[str, Any] = d.call("context", {"workspace": ws, **params})
    return result


def write_memory(root: Path, text: str) -> None:
    (root / "memory").mkdir(exist_ok=True)
    (root / "memory" / "MEMORY.md").write_text(text, encoding="utf-8")


def snapshot_files(home: Path, ws: str) -> list[Path]:
    return sorted((home / "state" / "workspaces" / ws / "context").glob("*"))


def test_stable_is_byte_identical_whatever_the_prompt(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    write_memory(root, MEMORY)
    compiled(daemon, ws, rule(observe(daemon, ws)))
    daemon.call("remember", {"workspace": ws, "text": "决定：串口超时改为 3 秒", "type": "decision"})
    device = {"model_id": "KX-200", "fw_version": "1.2.5"}
    prompts = [None, "", "串口超时怎么处理", "what did we decide yesterday?", "jobs.json", "x" * 50_000]
    answers = [context(daemon, ws, **device, **({} if q is None else {"query_text": q})) for q in prompts]
    stable = answers[0]["stable"]
    assert all(a["stable"] == stable for a in answers)
    text = stable["text"]
    assert stable["sha256"] == hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert not stable["truncated"] and stable["snapshot"] == "none"
    assert "- transport.uart.baud: 921600  (uart-flow-control)" in text
    assert "- transport.uart.flow_control: rts_cts  (uart-flow-control)" in text
    assert "串口波特率固定为 921600" in text and text.index("Rules in force") < text.index("Long-term memory")
    assert [s["kind"] for s in stable["sources"]] == ["rules", "memory"]
    assert stable["sources"][1]["sha256"] == hashlib.sha256(MEMORY.encode()).hexdigest()
    assert stable["sources"][0]["rules"] == ["uart-flow-control"]
    # without a device: no rules (decision 0007), the memory alone; another version: the rules that match it
    bare = context(daemon, ws)["stable"]
    assert "Rules in force" not in bare["text"] and [s["kind"] for s in bare["sources"]] == ["memory"]
    other = context(daemon, ws, model_id="KX-200", fw_version="2.0.0")["stable"]
    assert "(no rule matches)" in other["text"] and other["sha256"] != stable["sha256"]


def test_without_a_query_nothing_is_recalled(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    write_memory(root, MEMORY)
    daemon.call("remember", {"workspace": ws, "text": "something to recall QZXRECALL"})
    for params in ({}, {"query_text": ""}, {"query_text": "   \n"}):
        first, second = context(daemon, ws, **params), context(daemon, ws, **params)
        assert first == second
        assert first["dynamic"] == {
            "text": "",
            "items": [],
            "recent": [],
            "asks_about_past": False,
        }  # degraded: absent (null)


def test_recall_gives_passages_that_get_reads(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    write_memory(root, MEMORY)
    daemon.call("index", {"workspace": ws})
    entry = daemon.call("remember", {"workspace": ws, "text": "串口超时 ERR_QZX42 原因是流控没开", "type": "event"})
    dynamic = context(daemon, ws, query_text="ERR_QZX42 串口超时")["dynamic"]
    item = dynamic["items"][0]
    assert set(item) == {"path", "start_line", "lines", "heading", "snippet", "score"}
    assert item["path"] == entry["path"] and "ERR_QZX42" in item["snippet"] and item["score"] > 0
    got = daemon.call("get", {"workspace": ws, "path": item["path"], "from_line": item["start_line"]})
    assert "ERR_QZX42" in "\n".join(got["text"].splitlines()[: item["lines"]])
    assert f"### {item['path']}:{item['start_line']}" in dynamic["text"]
    assert not dynamic["asks_about_past"] and dynamic["recent"] == [] and "degraded" not in dynamic
    # MEMORY.md is whole in the stable part: its passages are not repeated in dynamic
    again = context(daemon, ws, query_text="921600 RTS/CTS 波特率")["dynamic"]
    assert all(i["path"] != "memory/MEMORY.md" for i in again["items"])


def test_a_prompt_about_the_past_adds_recent_daily_notes(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    (root / "memory").mkdir(exist_ok=True)
    for day in range(1, 6):
        (root / "memory" / f"2026-03-0{day}.md").write_text(
            f"## 2026-03-0{day}\n\n## 2026-03-0{day} 09:00 — note\n- morning {day} <private>secret{day}</private>\n\n"
            f"## 2026-03-0{day} 17:30 — decision\n- 第{day}天的决定 evening {day}\n",
            encoding="utf-8",
        )
    dynamic = context(daemon, ws, query_text="上周我们决定了什么？")["dynamic"]
    assert dynamic["asks_about_past"]
    recent = dynamic["recent"]
    assert [(r["path"], r["heading"]) for r in recent] == [
        ("memory/2026-03-05.md", "2026-03-05 17:30 — decision"),
        ("memory/2026-03-05.md", "2026-03-05 09:00 — note"),
        ("memory/2026-03-04.md", "2026-03-04 17:30 — decision"),
        ("memory/2026-03-04.md", "2026-03-04 09:00 — note"),
        ("memory/2026-03-03.md", "2026-03-03 17:30 — decision"),
        ("memory/2026-03-03.md", "2026-03-03 09:00 — note"),
    ]
    assert recent[0]["start_line"] == 6 and recent[0]["lines"] == 2
    text = dynamic["text"]
    assert text.startswith("## Recent daily notes, newest first\n\n### memory/2026-03-05.md:6 — 2026-03-05 17:30")
    assert "第5天的决定" in text and text.index("evening 5") < text.index("morning 5") < text.index("evening 4")
    # recall adds what the recent days do not hold, never an entry twice
    assert {i["path"] for i in dynamic["items"]} <= {"memory/2026-03-01.md", "memory/2026-03-02.md"}
    recent_part = text.split("## Recalled from memory")[0]
    assert "secret" not in text and "2026-03-02" not in recent_part
    assert context(daemon, ws, query_text="rename the previous_page variable")["dynamic"]["recent"] == []
    daemon.call("index", {"workspace": ws})  # a hand-written private span is indexed; recall never shows it
    leak = context(daemon, ws, query_text="secret3 morning")["dynamic"]
    assert leak["items"] and "secret" not in leak["text"] and "morning" in leak["text"]


def test_a_session_keeps_its_bytes_across_changes_and_restarts(daemon_factory: Any) -> None:
    d: Daemon = daemon_factory()
    root = short_tmp("ws")
    ws = d.call("workspace.add", {"path": str(root)})["workspace_id"]
    write_memory(root, MEMORY)
    first = context(d, ws, session_id="sess-A", query_text="hello")["stable"]
    assert first["snapshot"] == "created"
    write_memory(root, MEMORY + "\n## Added later\n- a new convention QZXNEW\n")
    same = context(d, ws, session_id="sess-A", query_text="something else")["stable"]
    assert same["snapshot"] == "reused"
    assert {k: v for k, v in same.items() if k != "snapshot"} == {k: v for k, v in first.items() if k != "snapshot"}
    fresh = context(d, ws, session_id="sess-B")["stable"]
    assert "QZXNEW" in fresh["text"] and fresh["snapshot"] == "created"
    assert "QZXNEW" in context(d, ws)["stable"]["text"]  # no session: always the files as they are
    # a session that asks about a device gets that device's text (another snapshot)
    assert context(d, ws, session_id="sess-A", budget_chars=5000)["stable"]["snapshot"] == "created"
    d.stop()
    d2: Daemon = daemon_factory()
    after = context(d2, ws, session_id="sess-A")["stable"]
    assert after["snapshot"] == "reused" and after["text"] == first["text"] and after["sha256"] == first["sha256"]
    files = snapshot_files(d2.home, ws)
    assert len(files) == 3 and all(re.fullmatch(r"[0-9a-f]{64}\.json", f.name) for f in files)
    assert all(f.stat().st_mode & 0o077 == 0 for f in files)


def _daemon_with(home: Path, **env: str) -> Daemon:
    return Daemon(home, {**daemon_env(home), **env}).start()


def test_snapshots_expire_and_their_number_is_bounded(home: Path) -> None:
    d = _daemon_with(home, MEMORYD_CONTEXT_SNAPSHOT_TTL_HOURS="0", MEMORYD_CONTEXT_SNAPSHOT_MAX_FILES="3")
    try:
        root = short_tmp("ws")
        ws = d.call("workspace.add", {"path": str(root)})["workspace_id"]
        write_memory(root, MEMORY)
        assert context(d, ws, session_id="s")["stable"]["snapshot"] == "created"
        write_memory(root, MEMORY + "\n## Later\n- QZXLATER\n")
        again = context(d, ws, session_id="s")["stable"]  # TTL 0: expired at once
        assert again["snapshot"] == "created" and "QZXLATER" in again["text"]
        for n in range(10):
            context(d, ws, session_id=f"many-{n}")
        assert len(snapshot_files(home, ws)) <= 3
    finally:
        d.stop()
    # a short TTL: the session's bytes hold, then give way to the files once it has passed (waited for, not slept)
    d = _daemon_with(home, MEMORYD_CONTEXT_SNAPSHOT_TTL_HOURS="0.0002")  # 0.72 s
    try:
        assert context(d, ws, session_id="t")["stable"]["snapshot"] == "created"
        write_memory(root, MEMORY + "\n## Later still\n- QZXEXPIRED\n")
        wait_for(lambda: "QZXEXPIRED" in context(d, ws, session_id="t")["stable"]["text"])
    finally:
        d.stop()


def test_truncation_stays_within_the_budget_and_names_what_was_cut(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    sections = [
        f"## 第{n}节 Section {n}\n" + "".join(f"- 记录 {n}.{k} " + "长" * 40 + "\n" for k in range(8))
        for n in range(40)
    ]
    write_memory(root, "# Memory\n\n" + "\n".join(sections))
    stable = context(daemon, ws)["stable"]
    text = stable["text"]
    assert stable["truncated"] and len(text) <= 9000 and stable["sources"][0]["cut"]
    last = text.splitlines()[-1]
    assert last.startswith("[memoryd: cut to 9000 characters; left out: memory/MEMORY.md from line ")
    first_cut = int(re.search(r"from line (\d+)", last).group(1))  # type: ignore[union-attr]
    lines = (root / "memory" / "MEMORY.md").read_text(encoding="utf-8").splitlines()
    shown = text.splitlines()[:-2]  # the text before the blank line and the note
    assert shown[-1] == [line for line in lines[: first_cut - 1] if line.strip()][-1]  # cut right after it
    assert "and " in last and "more" in last and "memoryctl get memory/MEMORY.md --from" in last
    assert "Section 0" in text and "Section 39" not in text.replace(last, "")
    small = context(daemon, ws, budget_chars=2000)["stable"]
    assert small["truncated"] and len(small["text"]) <= 2000
    large = context(daemon, ws, budget_chars=50_000)["stable"]  # a request may lower the ceiling, never raise it
    assert large == stable
    with pytest.raises(RemoteError) as info:
        context(daemon, ws, budget_chars=10)
    assert info.value.name == "INVALID_PARAMS"


@settings(max_examples=200, deadline=None)
@given(
    memory=st.lists(
        st.one_of(
            st.text(st.characters(codec="utf-8"), max_size=300),  # utf-8: no surrogates
            st.from_regex(r"## [a-z中文]{0,30}", fullmatch=True),
            st.just("```"),
        ),
        max_size=200,
    ).map("\n".join),
    facts=st.dictionaries(st.from_regex(r"[a-z]{1,12}(\.[a-z]{1,8}){0,2}", fullmatch=True), st.text(max_size=600)),
    budget=st.integers(1000, 12_000),
)
def test_the_stable_text_never_exceeds_its_budget(memory: str, facts: dict[str, str], budget: int) -> None:
    rules = render.ResolvedRules("M", "1.0", None, facts, dict.fromkeys(facts, "r"), ["r"])
    out = render.render(rules, memory, "0" * 64, budget)
    assert len(out.text) <= budget
    assert out.truncated == out.text.rsplit("\n", 1)[-1].startswith("[memoryd: cut to")
    assert out == render.render(rules, memory, "0" * 64, budget)  # deterministic
    if out.sources[0].cut:  # the rules were cut: the note says so first
        assert "left out: rules:" in out.text.rsplit("\n", 1)[-1]


@pytest.mark.parametrize(
    "session_id",
    ["../../../../etc/passwd", "/tmp/evil", "a/b/../../c", "..", "\x00nul", "名字 with spaces", "x" * 4096, "CON"],
)
def test_a_hostile_session_id_stays_a_file_name(daemon: Daemon, workspace: tuple[Path, str], session_id: str) -> None:
    root, ws = workspace
    write_memory(root, MEMORY)
    daemon.call("index", {"workspace": ws})  # the index's files exist before we look
    before = {p for p in daemon.home.rglob("*")} | {p for p in root.rglob("*")}
    first = context(daemon, ws, session_id=session_id)["stable"]
    assert context(daemon, ws, session_id=session_id)["stable"]["snapshot"] == "reused"
    assert first["snapshot"] == "created"
    created = ({p for p in daemon.home.rglob("*")} | {p for p in root.rglob("*")}) - before
    folder = daemon.home / "state" / "workspaces" / ws / "context"
    files = [p for p in created if p.is_file() and p.parent == folder]
    assert len(files) == 1 and re.fullmatch(r"[0-9a-f]{64}\.json", files[0].name)
    index_files = daemon.home / "state" / "workspaces" / ws  # the index, built meanwhile, aside
    outside_index = {p for p in created if p.is_relative_to(folder) or not p.is_relative_to(index_files)}
    assert outside_index <= {folder, files[0]}  # nothing else, anywhere in the daemon's home or the workspace
    with pytest.raises(RemoteError) as info:
        context(daemon, ws, session_id="x" * 4097)
    assert info.value.name == "INVALID_PARAMS"


def test_a_damaged_snapshot_is_rendered_again(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    write_memory(root, MEMORY)
    context(daemon, ws, session_id="dmg")
    [snapshot] = snapshot_files(daemon.home, ws)
    snapshot.write_text('{"v": 1, "created": 0, "stable": {"text": "forged"')
    again = context(daemon, ws, session_id="dmg")["stable"]
    assert again["snapshot"] == "created" and "串口波特率" in again["text"]
    data = json.loads(snapshot.read_text())
    data["stable"]["text"] = "forged"  # its checksum no longer matches
    snapshot.write_text(json.dumps(data))
    assert context(daemon, ws, session_id="dmg")["stable"]["text"] == again["text"]


def test_params_are_checked(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    _, ws = workspace
    for bad in ({"model_id": "KX-200"}, {"fw_version": "1.0"}, {"instance_id": "bench-3"}, {"model_id": "../x"}):
        with pytest.raises(RemoteError) as info:
            context(daemon, ws, **bad)
        assert info.value.name == "INVALID_PARAMS"
    with pytest.raises(RemoteError) as info:
        context(daemon, ws, model_id="KX-200", fw_version="not a version")
    assert info.value.name == "MEMORY_VERSION_INVALID"


def test_a_memory_file_outside_the_workspace_is_not_read(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    outside = short_tmp("out") / "secret.md"
    outside.write_text("## secret\n- QZXOUTSIDE\n")
    (root / "memory").mkdir(exist_ok=True)
    (root / "memory" / "MEMORY.md").symlink_to(outside)
    stable = context(daemon, ws)["stable"]
    assert "QZXOUTSIDE" not in stable["text"] and stable["sources"] == []


def test_memoryctl_context_prints_stable_then_dynamic(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    write_memory(root, MEMORY)
    daemon.call("remember", {"workspace": ws, "text": "flow control fixed by QZXCLI"})
    out = daemon.memoryctl("context", "--query", "QZXCLI flow control", cwd=root)
    assert out.returncode == 0, out.stderr
    stable, dynamic = out.stdout.split("\n----- dynamic -----\n")
    assert "串口波特率固定为 921600" in stable and "QZXCLI" in dynamic and "QZXCLI" not in stable
    raw = daemon.memoryctl("context", "--json", "-w", ws, "--session-id", "cli", "--query", "QZXCLI")
    answer = json.loads(raw.stdout)["data"]
    assert answer["stable"]["snapshot"] == "created" and answer["dynamic"]["items"]
    only = daemon.memoryctl("context", "--part", "stable", "-w", ws, "--session-id", "cli")
    assert only.stdout == answer["stable"]["text"] + "\n"
    bad = daemon.memoryctl("context", "-w", ws, "--model-id", "KX-200")
    assert bad.returncode == 2 and "fw_version" in bad.stderr


def test_the_trigger_is_precise_and_finds_past_references() -> None:
    assert len(PROMPTS) >= 40 and sum(label for _, label in PROMPTS) * 2 == len(PROMPTS)
    chinese = [label for text, label in PROMPTS if re.search(r"[\u4e00-\u9fff]", text)]
    assert sum(chinese) >= 10 and len(chinese) - sum(chinese) >= 10  # both languages, both labels
    predicted = [(asks_about_past(text), label) for text, label in PROMPTS]
    tp = sum(p and t for p, t in predicted)
    fp = sum(p and not t for p, t in predicted)
    fn = sum(t and not p for p, t in predicted)
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    print(f"\npast-reference trigger on {len(PROMPTS)} prompts: precision {precision:.3f}, recall {recall:.3f}")
    assert precision >= 0.9 and recall >= 0.9


def test_the_context_settings_are_checked(tmp_path: Path) -> None:
    assert (
        load_settings(home=str(tmp_path), overrides={"context_snapshot_ttl_hours": "0"}).context.snapshot_ttl_hours == 0
    )
    for name, value in (("context_snapshot_ttl_hours", "-1"), ("context_budget_chars", "500")):
        with pytest.raises(SettingsError):
            load_settings(home=str(tmp_path), overrides={name: value})


def test_recall_does_not_repeat_memory_md_from_the_session_snapshot(
    daemon: Daemon, workspace: tuple[Path, str]
) -> None:
    """SessionStart injected MEMORY.md; the prompts of that session (their stable part from the snapshot, whatever
    budget they ask with) recall no passage of it again, but do recall what was added to it since."""
    root, ws = workspace
    write_memory(root, MEMORY)
    daemon.call("index", {"workspace": ws})
    start = context(daemon, ws, session_id="sess-R", budget_chars=9000)
    assert start["stable"]["snapshot"] == "created" and "921600" in start["stable"]["text"]
    for n in range(3):  # the hook's per-prompt call: same session, the settings' budget
        answer = context(daemon, ws, session_id="sess-R", budget_chars=9000, query_text="921600 RTS/CTS 波特率")
        assert answer["stable"]["snapshot"] == "reused", n
        assert all(i["path"] != "memory/MEMORY.md" for i in answer["dynamic"]["items"]), answer["dynamic"]
    write_memory(root, MEMORY + "\n## Added later\n- the flash tool needs QZXLATER first\n")
    daemon.call("index", {"workspace": ws})
    later = context(daemon, ws, session_id="sess-R", budget_chars=9000, query_text="QZXLATER flash tool 921600")
    assert later["stable"]["snapshot"] == "reused" and "QZXLATER" not in later["stable"]["text"]
    paths = [(i["path"], i["snippet"]) for i in later["dynamic"]["items"]]
    assert any("QZXLATER" in s for p, s in paths if p == "memory/MEMORY.md"), paths  # new since the snapshot
    assert not any("921600" in s for p, s in paths if p == "memory/MEMORY.md"), paths  # in the snapshot


def test_the_prompt_hook_does_not_repeat_what_session_start_injected(
    daemon: Daemon, workspace: tuple[Path, str]
) -> None:
    from tests.test_hooks import answer, hook

    root, ws = workspace
    write_memory(root, MEMORY)
    daemon.call("index", {"workspace": ws})
    env = {**daemon.env, "MEMORYD_SOCKET": str(daemon.socket)}
    base = {"session_id": "sess-H", "cwd": str(root)}
    out = hook(env, "claude", "SessionStart", {**base, "hook_event_name": "SessionStart", "source": "startup"})
    started = answer(out)
    assert started is not None and "921600" in started["hookSpecificOutput"]["additionalContext"]
    for _n in range(2):
        prompt = {**base, "hook_event_name": "UserPromptSubmit", "prompt": "波特率 921600 要开 RTS/CTS 吗"}
        out = hook(env, "claude", "UserPromptSubmit", prompt)
        said = answer(out)
        assert said is None or "921600" not in said["hookSpecificOutput"]["additionalContext"], said


def test_recall_leaves_out_candidate_rules_that_search_still_finds(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    """Issue 19 §4: context.dynamic injected low-confidence candidate rules (spec/memory/candidates/, not reviewed)
    as if they were reviewed. Recall leaves them out (docs/reference/rules.md); search and rules.search find them."""
    _, ws = workspace
    oid = observe(daemon, ws)
    low = rule(oid, rule_id="qzx-guess", confidence=0.2, summary="QZXCANDIDATE maybe the UART needs a 2 s timeout")
    sure = rule(oid, rule_id="qzx-sure", confidence=0.9, summary="QZXCANDIDATE reviewed: flow control on")
    compiled(daemon, ws, low, sure)
    hits = daemon.call("search", {"workspace": ws, "query": "QZXCANDIDATE"})["hits"]
    paths = {h["path"] for h in hits}
    assert any(p.startswith("spec/memory/candidates/") for p in paths), paths
    assert any(p.startswith("spec/memory/profiles/") for p in paths), paths
    query = "QZXCANDIDATE reviewed UART timeout flow control"
    answer = daemon.call("search", {"workspace": ws, "query": query})
    found = answer["hits"]
    relevance = {h["path"].split("/")[2]: h["relevance"] for h in found}
    # context.min_relevance's default, and its share when the search ran on words alone (embeddings off here)
    floor = ContextSettings().min_relevance * (WORDS_ONLY_SHARE if answer["mode"] == "bm25" else 1.0)
    assert relevance["candidates"] >= floor and relevance["profiles"] >= floor, found  # both clear the recall floor
    dynamic = context(daemon, ws, query_text=query)["dynamic"]
    assert dynamic["items"] and all(not i["path"].startswith("spec/memory/candidates/") for i in dynamic["items"])
    assert "maybe the UART" not in dynamic["text"] and "qzx-guess" not in dynamic["text"]
