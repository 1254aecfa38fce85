"""The note index on its own: parallel preparation equals serial, rebuild swaps atomically, pruning keeps rare
terms, rule files are indexed by rule."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memoryd.store.index import Hit, NoteIndex
from memoryd.store.prepare import batches as _batches
from memoryd.store.prepare import (
    file_kind,
    indexed_files,
    indexed_stats,
    prepare_encoded,
    prepare_many,
    prepare_text,
)
from memoryd.text import textindex
from tests.conftest import daily_logs, short_tmp


def test_parallel_preparation_equals_serial() -> None:
    items = [
        (i, f"memory/2026-01-0{i}.md", f"## 2026-01-0{i}\n- 串口超时 ERR_X_{i} facts.a.b{i}\n" + "word " * 50)
        for i in range(1, 9)
    ]
    assert list(prepare_many(items, 40, processes=2)) == [prepare_encoded(item, 40) for item in items]


def test_pool_workers_exit_when_the_indexing_process_dies(tmp_path: Path) -> None:
    pid_file = tmp_path / "workers"
    code = (
        "import multiprocessing, os, sys\n"
        "from memoryd.store.prepare import prepare_many\n"
        "if __name__ == '__main__':\n"
        "    items = [(n, f'memory/{n}.md', 'word ' * 200) for n in range(400)]\n"
        "    prepared = prepare_many(items, 40, processes=2)\n"
        "    next(prepared)\n"
        "    pids = ' '.join(str(p.pid) for p in multiprocessing.active_children())\n"
        "    open(sys.argv[1], 'w').write(pids)\n"
        "    os._exit(0)  # as a daemon killed mid-rebuild: no cleanup at all\n"
    )
    # the workers inherit stdout and stderr: a pipe would stay open as long as they live
    with open(tmp_path / "stderr", "wb") as stderr:
        done = subprocess.run([sys.executable, "-c", code, str(pid_file)], stdout=stderr, stderr=stderr, timeout=60)
    assert done.returncode == 0, (tmp_path / "stderr").read_text()
    pids = [int(pid) for pid in pid_file.read_text().split()]
    assert pids
    deadline = time.monotonic() + 10
    try:
        while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(alive(pid) for pid in pids)
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "zombie" in status.read_text())


def test_threaded_runs_of_small_items_wait_for_enough_bytes() -> None:
    """Many small files: each run of inserts is a statement and an FTS5 segment, so a run waits for
    RUN_MIN_BYTES of prepared rows (the last one excepted) instead of taking the few files ready."""
    from memoryd.store.prepare import RUN_MIN_BYTES

    items = [bytes([n % 256]) * 1000 for n in range(1000)]
    runs = list(_batches(iter(items), threaded=True, size=len))
    assert [item for run in runs for item in run] == items
    assert all(sum(map(len, run)) >= RUN_MIN_BYTES for run in runs[:-1])
    assert len(runs) <= len(items) * 1000 // RUN_MIN_BYTES + 1


def test_threaded_batches_keep_order_raise_in_the_caller_and_stop() -> None:
    assert [n for run in _batches(iter(range(500)), threaded=True) for n in run] == list(range(500))

    def failing() -> Iterator[int]:
        yield 1
        raise OSError("unreadable")

    with pytest.raises(OSError, match="unreadable"):
        list(_batches(failing(), threaded=True))
    threads = threading.active_count()
    runs = _batches(iter(range(100_000)), threaded=True)
    next(runs)
    runs.close()  # the caller stops early (an insert failed): the worker thread ends too
    assert threading.active_count() == threads


def test_rebuild_and_incremental_sync(tmp_path: Path) -> None:
    root = short_tmp("ws")
    (root / "memory").mkdir()
    (root / "memory" / "a.md").write_text("## A\n- alpha KQZ_ONE\n")
    index = NoteIndex(root, tmp_path / "state" / "index.sqlite")
    assert index.open() == "missing"
    assert index.counts() == (1, 1)
    (root / "memory" / "b.md").write_text("## B\n- beta\n\n## C\n- gamma\n")
    steps: list[tuple[int, int]] = []
    report = index.sync(progress=lambda done, total: steps.append((done, total)))
    assert (report.files_indexed, report.files_unchanged) == (1, 1)
    assert index.counts() == (2, 3)
    assert steps[-1] == (4, 4)
    assert index.sync(progress=lambda done, total: steps.append((done, total))).files_unchanged == 2  # nothing to do
    (root / "memory" / "b.md").write_text("## B\n- beta\n")  # a changed file: its old chunks go
    index.sync(["memory/b.md"])
    assert index._chunk_count == index.counts()[1] == 2  # kept by deltas, never by count(*) per write
    (root / "memory" / "b.md").write_text("## B\n- beta\n\n## C\n- gamma\n")
    index.sync()
    (root / "memory" / "a.md").unlink()
    assert index.sync().files_removed == 1
    assert index._chunk_count == index.counts()[1] == 2
    hits = index.search(textindex.join_terms(textindex.match_terms("gamma")) or "", 5)
    assert [(h.path, h.start_line, h.heading) for h in hits] == [("memory/b.md", 4, "## C")]
    index.close()
    assert NoteIndex(root, tmp_path / "state" / "index.sqlite").open() is None  # reusable as is


def test_a_pipelined_rebuild_stores_what_preparation_gives(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    texts = daily_logs(root, 20)  # prepared in a worker thread
    index = NoteIndex(root, tmp_path / "index.sqlite")
    report = index.rebuild()
    expected = [(rel, *row[:4]) for rel in sorted(texts) for row in prepare_text(rel, texts[rel])]
    assert index._writer is not None
    stored = index._writer.execute(
        "SELECT path, start_line, end_line, heading, text FROM chunks JOIN documents USING (doc_id) ORDER BY chunk_id"
    ).fetchall()
    assert [tuple(row) for row in stored] == expected
    assert report.chunk_delta == index._chunk_count == len(expected)
    top = index.search(textindex.join_terms(textindex.match_terms("ERR_D7_33")) or "", 3)[0]
    assert (top.path, top.start_line) == ("memory/2026-03-07.md", 100)
    index.close()


def test_a_rebuilds_segments_merge_into_one_in_steps_without_changing_an_answer(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    daily_logs(root, 20)
    index = NoteIndex(root, tmp_path / "index.sqlite")
    index.open()
    queries = ["ERR_D7_33", "串口超时", "entry word", "2026-03-02 10:05"]

    def answers() -> list[list[Hit]]:
        return [index.search(textindex.join_terms(textindex.match_terms(q)) or "", 5) for q in queries]

    for day in (1, 2):  # each sync that changes something adds a segment
        (root / f"memory/2026-03-0{day}.md").write_text(f"## 2026-03-0{day} 11:00 — note\n- ERR_D7_33 again\n")
        index.sync([f"memory/2026-03-0{day}.md"])
    before = answers()
    assert index.merge_pending and index.segments() >= 2  # the rebuild's (one per statement) and the syncs'
    steps = 1
    while index.merge_step(pages=16):
        steps += 1
    assert (index.segments(), index.merge_pending, steps > 2) == (1, False, True)
    assert answers() == before
    assert not index.merge_step()  # nothing left: no work

    # a write while merging adds a segment of its own; the merge that was started still finishes
    index.rebuild()
    for day in (1, 2):
        (root / f"memory/2026-03-0{day}.md").write_text(f"## 2026-03-0{day} 12:00 — note\n- more\n")
        index.sync([f"memory/2026-03-0{day}.md"])
    assert index.merge_step(pages=16)
    (root / "memory" / "2026-03-03.md").write_text("## 2026-03-03 11:00 — note\n- ZQXNEW arrived\n")
    index.sync(["memory/2026-03-03.md"])
    while index.merge_step(pages=16):
        pass
    assert index.segments() <= 2
    assert [h.path for h in index.search("ZQXNEW", 5)] == ["memory/2026-03-03.md"]
    assert (answers()[0][0].path, answers()[0][0].start_line) == ("memory/2026-03-07.md", 100)
    # segments left when the daemon stopped are found at the next open and merged like a rebuild's
    (root / "memory" / "2026-03-04.md").write_text("## 2026-03-04 11:00 — note\n- one more segment\n")
    index.sync(["memory/2026-03-04.md"])
    assert index.segments() >= 2
    index.close()
    reopened = NoteIndex(root, tmp_path / "index.sqlite")
    assert reopened.open() is None and reopened.merge_pending
    while reopened.merge_step():
        pass
    assert reopened.segments() == 1
    reopened.close()
    assert NoteIndex(root, tmp_path / "index.sqlite").open() is None  # one segment: nothing pending
    index.open()
    index.rebuild()
    index.close()  # closed with a merge pending: nothing to do, and it says so (the indexer must not spin)
    assert (index.merge_step(), index.merge_pending) == (False, False)


def test_prune_keeps_rare_terms_and_drops_common_ones(tmp_path: Path) -> None:
    root = short_tmp("ws")
    (root / "memory").mkdir()
    body = "".join(f"## E{i}\n- common words everywhere entry {i}\n\n" for i in range(1500))
    (root / "memory" / "big.md").write_text(body + "## Rare\n- common words and a rareterm\n")
    index = NoteIndex(root, tmp_path / "index.sqlite")
    index.open()
    terms = index.prune(textindex.match_terms("common rareterm"))
    assert [t.token for t in terms] == ["rareterm"]
    only_common = index.prune(textindex.match_terms("common words"))
    assert only_common  # never empty: the rarest words remain
    hits = index.search(textindex.join_terms(terms) or "", 3)
    assert hits[0].heading == "## Rare"


def test_a_known_word_is_found_however_common_and_whatever_unknown_words_come_with_it(tmp_path: Path) -> None:
    root = short_tmp("ws")
    (root / "memory").mkdir()
    body = "".join(f"## E{i}\n- firmware update entry {i}\n\n" for i in range(1200))  # in every chunk
    (root / "memory" / "big.md").write_text(body + "## Serial\n- 串口超时 after the firmware update\n")
    index = NoteIndex(root, tmp_path / "index.sqlite")
    index.open()
    assert index.counts()[1] >= 1000

    def found(query: str) -> list[Hit]:
        match = textindex.join_terms(index.prune(textindex.match_terms(query)))
        return [] if match is None else index.search(match, 5)

    assert len(found("firmware")) == 5
    assert found("firmware flashh")  # the issue: one unknown word emptied the results
    assert found("flashh firmware zzqx qqvv")
    assert found("update firmware flashh")  # two common words, and an unknown one
    assert found("flashh 串口超时")[0].heading == "## Serial"
    # a rare word that occurs still prunes the common ones
    kept = [t.token for t in index.prune(textindex.match_terms("firmware 串口超时 flashh"))]
    assert "firmware" not in kept and "串口" in kept
    index.close()


# --- rule files ---------------------------------------------------------------------------------------------

PROFILE = """\
rule_id: uart-flow-control
model_id: KX-200
fw_range: '>=1.2.0 <1.3.0'
priority: 10
summary: KX-200 1.2.x needs RTS/CTS or the UART drops bytes above 115200 baud
facts:
  transport.uart.flow_control: rts_cts
  transport.uart.baud: 921600
confidence: 0.9
provenance:
  observation_ids: [obs_01JD4S7W8Q3T5X9Y2Z6A7B8C9D]
  request_id: cr_01JD4S8A
revision: 1
created_at: '2026-11-23T11:00:00+00:00'
updated_at: '2026-11-23T11:00:00+00:00'
"""

CANDIDATE = """\
rule_id: uart-timeout-retry
model_id: KX-300
fw_range: '*'
summary: "\\u4E32\\u53E3\\u8D85\\u65F6 after a warm reset: retry the handshake twice"
facts:
  transport:
    retry_count: 2
confidence: 0.4
status: candidate
reason: below min_confidence
"""

OVERRIDES = """\
instance_id: bench-3
rules:
# the slow bench cable
- rule_id: bench-cable
  model_id: KX-200
  fw_range: '1.2.*'
  facts:
    transport.timeout_ms: 500

  # probe clock, measured on 2026-11-20
- rule_id: probe-clock
  model_id: KX-200
  fw_range: '*'
  summary: |
    logic probe
    needs the slow clock

- {rule_id: flow-inline, model_id: KX-200, fw_range: '*', facts: {gpio.flow_pin: 7}}
"""

# Notes that share the rules' words: uart, flow control, baud, transport, timeout, bench, KX-200 (once).
NOTES = (
    "".join(
        f"## 2026-11-23 10:{n:02d} — note\n- uart flow control checked on bench {n}: baud {n}00, transport timeout ok\n\n"
        for n in range(30)
    )
    + "## 2026-11-23 11:00 — note\n- the KX-200 on bench 3 needs a new uart cable, flow control is off\n"
)


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.fixture
def rules_index(tmp_path: Path) -> Iterator[tuple[Path, NoteIndex]]:
    root = (tmp_path / "ws").resolve()
    write(root, "memory/2026-11-23.md", NOTES)
    write(root, "spec/memory/profiles/KX-200/uart-flow-control.yaml", PROFILE)
    write(root, "spec/memory/candidates/KX-300/uart-timeout-retry.yml", CANDIDATE)
    write(root, "data/memory/overrides/bench-3.yaml", OVERRIDES)
    index = NoteIndex(root, tmp_path / "state" / "index.sqlite")
    index.open()
    yield root, index
    index.close()


def search(index: NoteIndex, query: str) -> list[Hit]:
    match = textindex.join_terms(index.prune(textindex.match_terms(query)))
    return index.search(match, 10) if match else []


def test_a_rule_is_found_by_fact_key_rule_id_and_model_id(rules_index: tuple[Path, NoteIndex]) -> None:
    _root, index = rules_index
    profile = "spec/memory/profiles/KX-200/uart-flow-control.yaml"
    for query in ("facts.transport.uart.baud", "transport.uart.baud", "uart-flow-control", "what is uart-flow-control"):
        top = search(index, query)[0]
        assert (top.path, top.start_line, top.end_line) == (profile, 1, 15), query
        assert top.heading == "rule uart-flow-control · KX-200 >=1.2.0 <1.3.0"
        assert top.text == PROFILE.rstrip("\n")
    hits = search(index, "KX-200")
    assert hits[0].path.startswith(("spec/", "data/"))  # the rules, above the note that mentions it in passing
    assert {h.path for h in hits} >= {profile, "data/memory/overrides/bench-3.yaml", "memory/2026-11-23.md"}


def test_nested_facts_keys_and_an_escaped_chinese_summary_are_searchable(rules_index: tuple[Path, NoteIndex]) -> None:
    _root, index = rules_index
    candidate = "spec/memory/candidates/KX-300/uart-timeout-retry.yml"
    for query in ("串口超时", "facts.transport.retry_count", "transport.retry_count", "KX-300"):
        top = search(index, query)[0]
        assert (top.path, top.start_line, top.end_line) == (candidate, 1, 10), query
        assert top.heading == "candidate rule uart-timeout-retry · KX-300 *"


def test_override_items_are_chunks_with_their_own_lines(rules_index: tuple[Path, NoteIndex]) -> None:
    _root, index = rules_index
    path = "data/memory/overrides/bench-3.yaml"
    expected = {
        "transport.timeout_ms": (4, 8, "override bench-3 rule bench-cable · KX-200 1.2.*"),
        "probe-clock": (11, 16, "override bench-3 rule probe-clock · KX-200 *"),  # no facts: still a rule
        "facts.gpio.flow_pin": (18, 18, "override bench-3 rule flow-inline · KX-200 *"),
    }
    for query, (start, end, heading) in expected.items():
        top = search(index, query)[0]
        assert (top.path, top.start_line, top.end_line, top.heading) == (path, start, end, heading), query
        assert top.text == "\n".join(OVERRIDES.splitlines()[start - 1 : end])
    assert search(index, "bench-3")[0].path == path  # the instance is an identifier of each of its rules


def test_a_broken_rule_file_is_indexed_as_text(rules_index: tuple[Path, NoteIndex]) -> None:
    root, index = rules_index
    broken = "spec/memory/profiles/KX-200/broken.yaml"
    write(root, broken, "rule_id: broken\nfacts: [unclosed\n" + "".join(f"line {n} zebrafinch\n" for n in range(60)))
    not_a_rule = "spec/memory/profiles/KX-200/list.yaml"
    write(root, not_a_rule, "- just\n- a list of okapi\n")
    wrong_override = "data/memory/overrides/bench-9.yaml"
    write(root, wrong_override, "instance_id: bench-9\nrules:\n- rule_id: no-model\n  narwhal: 1\n")
    assert index.sync().files_indexed == 3
    hits = search(index, "zebrafinch")
    assert {(h.path, h.heading) for h in hits} == {(broken, "")}
    assert [(h.start_line, h.end_line) for h in sorted(hits, key=lambda h: h.start_line)] == [(1, 40), (41, 62)]
    assert [(h.path, h.start_line, h.end_line) for h in search(index, "okapi")] == [(not_a_rule, 1, 2)]
    assert [(h.path, h.start_line, h.end_line) for h in search(index, "narwhal")] == [(wrong_override, 1, 4)]
    assert search(index, "facts.transport.uart.baud")[0].path.endswith("uart-flow-control.yaml")  # others unharmed


def test_hidden_files_other_trees_and_symlinks_out_are_not_indexed(
    rules_index: tuple[Path, NoteIndex], tmp_path: Path
) -> None:
    root, index = rules_index
    outside = tmp_path / "outside.yaml"
    outside.write_text(PROFILE.replace("uart-flow-control", "escaped-rule"))
    ignored = [
        "spec/memory/profiles/KX-200/.hidden.yaml",
        "spec/memory/profiles/.cache/KX-200/cached.yaml",
        "spec/memory/other/KX-200/other.yaml",
        "spec/memory/profiles/KX-200/notes.txt",
        "data/memory/observations.yaml",
    ]
    for rel in ignored:
        write(root, rel, PROFILE.replace("uart-flow-control", "hidden-rule"))
    (root / "spec/memory/profiles/KX-200/link-out.yaml").symlink_to(outside)
    (root / "spec/memory/profiles/linked-dir").symlink_to(root / "spec/memory/profiles/KX-200")
    (root / "spec/memory/profiles/KX-200/link-in.yaml").symlink_to(root / "data/memory/overrides/bench-3.yaml")
    index.sync()
    assert [rel for rel, _info in indexed_files(root)] == [
        "memory/2026-11-23.md",
        "spec/memory/profiles/KX-200/link-in.yaml",  # a symlink that stays in the workspace is fine
        "spec/memory/profiles/KX-200/uart-flow-control.yaml",
        "spec/memory/candidates/KX-300/uart-timeout-retry.yml",
        "data/memory/overrides/bench-3.yaml",
    ]
    out_of_bounds = {*ignored, "spec/memory/profiles/KX-200/link-out.yaml"}
    assert not out_of_bounds & {h.path for query in ("hidden-rule", "escaped-rule") for h in search(index, query)}
    # naming the paths does not get them in either
    named = [*ignored, "spec/memory/profiles/KX-200/link-out.yaml", "spec/memory/profiles/linked-dir/link-in.yaml"]
    assert indexed_stats(root, named) == {}
    assert list(indexed_stats(root, ["spec/memory/profiles/KX-200/link-in.yaml", *named])) == [
        "spec/memory/profiles/KX-200/link-in.yaml"
    ]
    assert index.sync(named).files_indexed == 0
    assert not out_of_bounds & {h.path for query in ("hidden-rule", "escaped-rule") for h in search(index, query)}
    assert file_kind("memory/../spec/memory/profiles/x.yaml") is None


def test_a_deleted_rule_file_leaves_the_index(rules_index: tuple[Path, NoteIndex]) -> None:
    root, index = rules_index
    files, chunks = index.counts()
    os.unlink(root / "spec/memory/profiles/KX-200/uart-flow-control.yaml")
    assert index.sync(["spec/memory/profiles/KX-200/uart-flow-control.yaml"]).files_removed == 1
    assert index.counts() == (files - 1, chunks - 1)
    assert all(not h.path.startswith("spec/memory/profiles/") for h in search(index, "uart-flow-control"))
    (root / "data/memory/overrides/bench-3.yaml").unlink()
    assert index.sync().files_removed == 1
    assert index.counts() == (files - 2, chunks - 4) == (2, index._chunk_count)
