"""The note index on its own: parallel preparation equals serial, rebuild swaps atomically, pruning keeps rare terms."""

from __future__ import annotations

from pathlib import Path

from memoryd.notes import textindex
from memoryd.store.index import NoteIndex, prepare_many, prepare_text
from tests.conftest import short_tmp


def test_parallel_preparation_equals_serial() -> None:
    texts = [f"## 2026-01-0{i}\n- 串口超时 ERR_X_{i} facts.a.b{i}\n" + "word " * 50 for i in range(1, 9)]
    assert list(prepare_many(texts, 40, total_bytes=1 << 30)) == [prepare_text(t, 40) for t in texts]


def test_rebuild_and_incremental_sync(tmp_path: Path) -> None:
    root = short_tmp("ws")
    (root / "memory").mkdir()
    (root / "memory" / "a.md").write_text("## A\n- alpha KQZ_ONE\n")
    index = NoteIndex(root, tmp_path / "state" / "index.sqlite")
    assert index.open() == "missing"
    assert index.counts() == (1, 1)
    (root / "memory" / "b.md").write_text("## B\n- beta\n\n## C\n- gamma\n")
    report = index.sync()
    assert (report.files_indexed, report.files_unchanged) == (1, 1)
    assert index.counts() == (2, 3)
    (root / "memory" / "b.md").write_text("## B\n- beta\n")  # a changed file: its old chunks go
    index.sync(["memory/b.md"])
    assert index._chunk_count == index.counts()[1] == 2  # kept by deltas, never by count(*) per write
    (root / "memory" / "b.md").write_text("## B\n- beta\n\n## C\n- gamma\n")
    index.sync()
    (root / "memory" / "a.md").unlink()
    assert index.sync().files_removed == 1
    assert index._chunk_count == index.counts()[1] == 2
    hits = index.search(textindex.match_expression("gamma") or "", 5)
    assert [(h.path, h.start_line, h.heading) for h in hits] == [("memory/b.md", 4, "## C")]
    index.close()
    assert NoteIndex(root, tmp_path / "state" / "index.sqlite").open() is None  # reusable as is


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
