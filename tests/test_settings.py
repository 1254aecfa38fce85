"""Settings in groups (issue 20 item 4): every flat name of before still works in the file, the environment and on
the command line; the file may nest them by group; bounds are checked once, at start; a new field needs no other
edit to be read from all three and documented; each group's limits hold where the domain enforces them."""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

import pytest

from memoryd.config import Settings, SettingsError, load_settings
from memoryd.settings import GROUPS, flat_names
from tests.conftest import Daemon, short_tmp

# The names memoryd.yaml, MEMORYD_<NAME> and the flags took before the groups: they keep working exactly.
FLAT_BEFORE = [
    "log_level",
    "max_line_bytes",
    "idle_timeout_s",
    "drain_timeout_s",
    "max_connections",
    "max_batch_members",
    "max_unsent_reply_bytes",
    "max_reply_bytes",
    "send_timeout_s",
    "remember_max_bytes",
    "snippet_max_chars",
    "search_max_limit",
    "get_max_lines",
    "chunk_max_lines",
    "index_max_file_bytes",
    "rule_max_file_bytes",
    "watch",
    "watch_debounce_ms",
    "reconcile_interval_s",
    "merge_idle_s",
    "observe_max_bytes",
    "min_confidence",
    "compile_max_observations",
    "compile_max_request_bytes",
    "embedding_provider",
    "embedding_url",
    "embedding_model",
    "embedding_timeout_s",
    "embedding_query_timeout_s",
    "search_fusion",
    "search_vector_weight",
    "search_dictionary",
    "vector_extension",
    "context_budget_chars",
    "context_dynamic_max_chars",
    "context_snapshot_ttl_hours",
    "context_snapshot_max_files",
    "recall_min_relevance",  # issue 21: what recall needs to be injected (added since)
    # issue 22: the curation policy (added since)
    "curate_max_bullet_chars",
    "curate_too_long",
    "curate_drop_date_lines",
    "curate_drop_url_lines",
    "curate_drop_duplicates",
    "curate_outside_sections",
    "curate_max_loss_share",
    "curate_max_update_bytes",
    "curate_conflict_keys",
    "curate_conflict_resolution",
    # issue 22 (h-audit): the observability group and the replay check
    "observability_trace",
    "observability_replay",
    "observability_replay_keep",
    "observability_recall_max_bytes",
    "vector_memory_mb",
    "audit_max_bytes",
    "gate_preferred_window_days",
    "gate_preferred_min_runs",
    "gate_preferred_structured_rate",
    "gate_preferred_written_rate",
    "gate_required_window_days",
    "gate_required_min_runs",
    "gate_required_daily_sections_rate",
    "gate_required_guard_rejected_max",
    # issue 22: consolidation (h-consol; replay_check / replay_top_k: h-audit's, in the curate group)
    "curate_routing_mode",
    "consolidate_entries_per_chunk",
    "consolidate_recent_days",
    "consolidate_memory_chars",
    "consolidate_daily_chars",
    "replay_check",
    "replay_top_k",
    # issue 22 (lifecycle): archive, TTL, automatic runs, and whether search looks into the archive
    "search_include_archive",
    "lifecycle_archive_after_days",
    "lifecycle_archive_ttl_days",
    "lifecycle_insights_ttl_days",
    "lifecycle_max_files",
    "lifecycle_max_bytes",
    "lifecycle_auto",
    "lifecycle_auto_apply",
    "lifecycle_auto_interval_hours",
]


def _other_value(group: str, field: str) -> Any:
    """A valid value that is not the default, for any field of any group."""
    info = GROUPS[group].model_fields[field]
    default = info.default
    if typing.get_origin(info.annotation) is typing.Literal:
        return next(choice for choice in typing.get_args(info.annotation) if choice != default)
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 1
    if isinstance(default, float):
        return default / 2
    if isinstance(default, tuple):
        return ("indent", "包管理器")
    return "/tmp/x"


def _read(settings: Settings, flat: str) -> Any:
    group, field = flat_names()[flat]
    return getattr(getattr(settings, group), field)


def test_every_flat_name_of_before_is_a_setting_still() -> None:
    assert set(flat_names()) == set(FLAT_BEFORE)


@pytest.mark.parametrize("flat", FLAT_BEFORE)
def test_each_setting_is_read_from_the_file_the_environment_and_a_flag(
    flat: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A field added to a group is read from all three with no other edit (this test names none)."""
    value = _other_value(*flat_names()[flat])
    text = str(value).lower() if isinstance(value, bool) else str(value)
    if isinstance(value, tuple):
        text = ",".join(value)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "memoryd.yaml").write_text(f"{flat}: {text}\n")
    assert _read(load_settings(home=str(tmp_path)), flat) == value
    (tmp_path / "config" / "memoryd.yaml").unlink()
    monkeypatch.setenv(f"MEMORYD_{flat.upper()}", text)
    assert _read(load_settings(home=str(tmp_path)), flat) == value
    monkeypatch.delenv(f"MEMORYD_{flat.upper()}")
    assert _read(load_settings(home=str(tmp_path), overrides={flat: text}), flat) == value
    assert (
        _read(load_settings(home=str(tmp_path)), flat)
        == GROUPS[flat_names()[flat][0]].model_fields[flat_names()[flat][1]].default
    )


def test_the_file_may_nest_settings_by_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "config").mkdir()
    settings_file = tmp_path / "config" / "memoryd.yaml"
    settings_file.write_text("search:\n  fusion: rrf\n  max_limit: 7\ncontext:\n  budget_chars: 2000\nwatch: false\n")
    settings = load_settings(home=str(tmp_path))
    assert (settings.search.fusion, settings.search.max_limit) == ("rrf", 7)
    assert settings.context.budget_chars == 2000 and settings.notes.watch is False
    monkeypatch.setenv("MEMORYD_SEARCH_MAX_LIMIT", "9")  # the environment still wins over the file
    assert load_settings(home=str(tmp_path)).search.max_limit == 9
    monkeypatch.delenv("MEMORYD_SEARCH_MAX_LIMIT")
    settings_file.write_text("search:\n  fusoin: rrf\n")
    with pytest.raises(SettingsError, match=r"unknown setting search\.'fusoin'"):
        load_settings(home=str(tmp_path))
    settings_file.write_text("search:\n  max_limit: 0\n")
    with pytest.raises(SettingsError, match="search_max_limit must be positive"):
        load_settings(home=str(tmp_path))


@pytest.mark.parametrize(
    ("flat", "raw", "says"),
    [
        ("search_fusion", "rfr", "search_fusion must be calibrated, weighted or rrf"),
        (
            "embedding_provider",
            "openai",
            "embedding_provider must be auto, use-m3, e5-small, openai-compatible or none",
        ),
        ("log_level", "loud", "log_level must be debug, info, warning or error"),
        ("min_confidence", "1.5", "min_confidence must be in (0, 1"),
        ("search_vector_weight", "0", "search_vector_weight must be positive"),
        ("context_budget_chars", "999", "context_budget_chars must be at least 1000"),
        ("context_snapshot_ttl_hours", "-1", "context_snapshot_ttl_hours must be positive or 0"),
        ("max_connections", "-3", "max_connections must be positive"),
        ("watch", "sometimes", "watch must be true or false"),
        ("chunk_max_lines", "1.5", "chunk_max_lines must be a whole number"),
    ],
)
def test_a_value_out_of_bounds_names_the_setting_and_where_it_came_from(
    flat: str, raw: str, says: str, tmp_path: Path
) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(home=str(tmp_path), overrides={flat: raw})
    assert str(caught.value).startswith(f"--{flat.replace('_', '-')}: {says}"), caught.value


def test_a_bad_value_in_the_file_stops_the_daemon_with_exit_3(daemon_factory: Any, home: Path) -> None:
    (home / "config").mkdir(parents=True, exist_ok=True)
    (home / "config" / "memoryd.yaml").write_text("search:\n  fusion: sum\n")
    d: Daemon = daemon_factory(start=False)
    d.start(wait=False)
    assert d.proc is not None
    assert d.proc.wait(timeout=30) == 3


def test_search_and_get_limits_hold_for_one_workspace_and_for_all(daemon_factory: Any, home: Path) -> None:
    """search_max_limit and get_max_lines are enforced by the notes domain: a search asking for more hits or a get
    for more lines gets what the settings allow, with one workspace and across all of them."""
    (home / "config").mkdir(parents=True, exist_ok=True)
    (home / "config" / "memoryd.yaml").write_text("search:\n  max_limit: 2\nget_max_lines: 3\n")
    d: Daemon = daemon_factory()
    ids = []
    for _ in range(2):
        project = short_tmp("lim")
        (project / "memory").mkdir()
        body = "".join(f"## 第{i}节 KQZLIMIT\n\nKQZLIMIT 行 {i}\n\n" for i in range(6))
        (project / "memory" / "notes.md").write_text(body, encoding="utf-8")
        ids.append(d.call("workspace.add", {"path": str(project)})["workspace_id"])
        d.call("index", {"workspace": ids[-1]})
    one = d.call("search", {"workspace": ids[0], "query": "KQZLIMIT", "limit": 5, "mode": "bm25"})
    assert len(one["hits"]) == 2
    everywhere = d.call(
        "search", {"scope": "all", "owner_token": d.owner_token(), "query": "KQZLIMIT", "limit": 5, "mode": "bm25"}
    )
    assert len(everywhere["hits"]) == 2
    got = d.call("get", {"workspace": ids[0], "path": "memory/notes.md", "lines": 10})
    assert got["text"].count("\n") <= 3 and "第0节" in got["text"], got


def test_curate_keys_are_a_list_in_the_file_and_comma_separated_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "config").mkdir()
    settings_file = tmp_path / "config" / "memoryd.yaml"
    settings_file.write_text(
        "curate:\n  conflict_keys: [language, '包管理器', '  indent   width ']\n  conflict_resolution: merge\n",
        encoding="utf-8",
    )
    curate = load_settings(home=str(tmp_path)).curate
    assert curate.conflict_keys == ("language", "包管理器", "indent width") and curate.conflict_resolution == "merge"
    monkeypatch.setenv("MEMORYD_CURATE_CONFLICT_KEYS", "语言, test runner,,")
    assert load_settings(home=str(tmp_path)).curate.conflict_keys == ("语言", "test runner")
    monkeypatch.delenv("MEMORYD_CURATE_CONFLICT_KEYS")
    for bad, says in (
        ("curate:\n  conflict_keys: [{a: 1}]\n", "curate_conflict_keys must be a list of text"),
        ("curate:\n  conflict_keys: ['***']\n", "not only wildcards"),
        ("curate:\n  conflict_resolution: ask\n", "must be keep_old, keep_new, ask_user or merge"),
        ("curate_max_loss_share: 1.5\n", "curate_max_loss_share must be in"),
        ("curate_too_long: cut\n", "curate_too_long must be truncate or drop"),
    ):
        settings_file.write_text(bad, encoding="utf-8")
        with pytest.raises(SettingsError, match=re.escape(says)):
            load_settings(home=str(tmp_path))
