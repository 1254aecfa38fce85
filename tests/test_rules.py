"""Evidence to rules through the real daemon: observe, compile prepare/apply, resolve, review, crash recovery."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from memoryctl.rpc import ClientError, RemoteError

from tests.conftest import ROOT, Daemon, short_tmp, wait_for

PROFILE = "spec/memory/profiles/KX-200/uart-flow-control.yaml"


def observe(
    d: Daemon, ws: str, text: str = "KX-200 fw 1.2.3 drops bytes at 921600 baud without RTS/CTS", **extra: Any
) -> str:
    params = {"workspace": ws, "kind": "test_result", "text": text, "source": "pytest", "model_id": "KX-200", **extra}
    oid: str = d.call("observe", params)["observation_id"]
    return oid


def prepare(d: Daemon, ws: str, **extra: Any) -> dict[str, Any]:
    result: dict[str, Any] = d.call("compile.prepare", {"workspace": ws, **extra})
    return result


def rule(oid: str, **extra: Any) -> dict[str, Any]:
    base = {
        "rule_id": "uart-flow-control",
        "model_id": "KX-200",
        "fw_range": ">=1.2.0 <1.3.0",
        "priority": 10,
        "facts": {"transport.uart.flow_control": "rts_cts", "transport.uart.baud": 921600},
        "confidence": 0.9,
        "provenance": {"observation_ids": [oid]},
        "summary": "1.2.x drops bytes above 115200 baud without RTS/CTS (串口超时)",
    }
    return {**base, **extra}


def response(request_id: str, *, rules: Any = (), candidates: Any = (), overrides: Any = ()) -> dict[str, Any]:
    items = [*rules, *candidates, *overrides]
    used = sorted({o for item in items for o in item.get("provenance", {}).get("observation_ids", [])})
    return {
        "request_id": request_id,
        "rules": list(rules),
        "candidates": list(candidates),
        "overrides": list(overrides),
        "provenance_summary": {"observation_ids_used": used},
    }


def apply(d: Daemon, ws: str, resp: dict[str, Any], **extra: Any) -> dict[str, Any]:
    result: dict[str, Any] = d.call("compile.apply", {"workspace": ws, "response": resp, **extra})
    return result


def compiled(d: Daemon, ws: str, *rules: dict[str, Any], overrides: Any = ()) -> dict[str, Any]:
    """Prepare a request over what was observed and apply these rules as its answer."""
    request = prepare(d, ws)
    assert request["request_id"], "nothing to compile"
    return apply(d, ws, response(request["request_id"], rules=rules, overrides=overrides))


def resolve(d: Daemon, ws: str, version: str, instance: str | None = None, model: str = "KX-200") -> dict[str, Any]:
    params = {"workspace": ws, "model_id": model, "fw_version": version}
    if instance:
        params["instance_id"] = instance
    result: dict[str, Any] = d.call("resolve", params)
    return result


def history(root: Path) -> list[dict[str, Any]]:
    path = root / "data/memory/history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# --- the golden flow ---------------------------------------------------------------------------------------------


def test_golden_flow(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    o1 = observe(daemon, ws, fw_version="1.2.3", tags=["uart"], data={"baud": 921600, "lost_bytes": 17})
    o2 = observe(daemon, ws, "bench-3 needs a 500 ms timeout", run_id="run-7", kind="log")
    request = prepare(daemon, ws)
    assert request["observation_count"] == 2 and request["remaining"] == 0 and not request["resumed"]
    body = request["request"]
    assert [o["observation_id"] for o in body["observations"]] == [o1, o2]
    assert body["policy"]["min_confidence"] == 0.7
    documented = (ROOT / "docs" / "reference" / "rules.md").read_text(encoding="utf-8")
    sentence = documented[documented.index("Recommended prefixes:") :].split("; other prefixes")[0]
    assert body["policy"]["recommended_prefixes"] == re.findall(r"`(\w+)`", sentence)  # what the docs promise
    assert body["response_schema"]["title"] == "compile_response" and "request_id" in body["instructions"]
    on_disk = json.loads((root / request["path"]).read_text())
    assert on_disk["request_id"] == request["request_id"] and request["path"].endswith("compile_request.json")

    resp = response(
        request["request_id"],
        rules=[rule(o1)],
        overrides=[
            {
                "instance_id": "bench-3",
                "model_id": "KX-200",
                "fw_range": "1.2.*",
                "facts": {"transport.timeout_ms": 500},
                "confidence": 0.95,
                "provenance": {"observation_ids": [o2]},
            }
        ],
    )
    planned = apply(daemon, ws, resp, dry_run=True)
    assert planned["dry_run"] and not planned["applied"] and planned.get("run_id") is None
    assert {w["path"] for w in planned["writes"]} == {PROFILE, "data/memory/overrides/bench-3.yaml"}
    assert not (root / "spec").exists() and not (root / "data/memory/history.jsonl").exists()

    done = apply(daemon, ws, resp)
    assert done["applied"] and done["run_id"].startswith("apply_")
    stored = yaml.safe_load((root / PROFILE).read_text())
    assert stored["facts"] == {"transport.uart.baud": 921600, "transport.uart.flow_control": "rts_cts"}
    assert stored["provenance"] == {"observation_ids": [o1], "request_id": request["request_id"]}
    assert stored["revision"] == 1 and stored["confidence"] == 0.9

    plain = resolve(daemon, ws, "1.2.3")
    assert plain["facts"] == {"transport.uart.baud": 921600, "transport.uart.flow_control": "rts_cts"}
    assert plain["trace"]["transport.uart.baud"]["rule_id"] == "uart-flow-control"
    bench = resolve(daemon, ws, "1.2.3", "bench-3")
    assert bench["facts"]["transport.timeout_ms"] == 500
    assert bench["trace"]["transport.timeout_ms"]["layer"] == "override"
    assert resolve(daemon, ws, "1.3.0")["facts"] == {}

    (entry,) = history(root)
    assert entry["run_id"] == done["run_id"] and entry["op"] == "compile.apply"
    assert entry["observation_ids"] == sorted([o1, o2])
    assert all(c["sha_after"] and c["sha_before"] is None for c in entry["changes"])

    shown = daemon.call("rules.show", {"workspace": ws, "rule_id": "uart-flow-control"})
    assert [o["observation_id"] for o in shown["observations"]] == [o1]
    assert shown["observations"][0]["data"] == {"baud": 921600, "lost_bytes": 17}
    assert shown["history"][0]["action"] == "create"
    # rules are in the note index: search finds them by fact key, rule id and Chinese summary
    for query in ("facts.transport.uart.baud", "uart-flow-control", "串口超时"):
        hits = daemon.call("search", {"workspace": ws, "query": query})["hits"]
        assert hits and hits[0]["path"] == PROFILE, (query, hits)
    # compiled evidence is not offered again; the response is kept next to its request
    assert prepare(daemon, ws).get("request_id") is None
    assert (root / f"data/memory/compile/{request['request_id']}/compile_response.json").exists()


def test_reapplying_the_same_response_changes_nothing(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    oid = observe(daemon, ws)
    request = prepare(daemon, ws)
    resp = response(request["request_id"], rules=[rule(oid)])
    first = apply(daemon, ws, resp)
    before = (root / PROFILE).stat().st_mtime_ns
    again = apply(daemon, ws, resp)
    assert again["already_applied"] and not again["applied"] and again["run_id"] == first["run_id"]
    assert (root / PROFILE).stat().st_mtime_ns == before
    assert len(history(root)) == 1
    # A different answer to an applied request is refused.
    with pytest.raises(RemoteError) as err:
        apply(daemon, ws, response(request["request_id"], rules=[rule(oid, priority=99)]))
    assert err.value.data["violations"][0]["pointer"] == "/request_id"


# --- observe -----------------------------------------------------------------------------------------------------


def test_observe_appends_strips_private_and_limits_size(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    ids = [observe(daemon, ws, f"reading {n} <private>token=hunter2</private>", run_id="r1") for n in range(20)]
    assert ids == sorted(ids) and len(set(ids)) == 20
    text = (root / "runs/r1/observations.jsonl").read_text()
    assert "hunter2" not in text and len(text.splitlines()) == 20
    observe(daemon, ws, "data too", data={"note": "x <private>secret</private> y", "list": ["<private>s</private>"]})
    assert "secret" not in (root / "data/memory/observations.jsonl").read_text()
    with pytest.raises(RemoteError) as err:
        observe(daemon, ws, "<private>only private</private>")
    assert err.value.data["name"] == "MEMORY_EMPTY"
    with pytest.raises(RemoteError) as err:
        observe(daemon, ws, "x" * 300_000)
    assert err.value.data["name"] == "MEMORY_TOO_LARGE"
    for bad in ({"kind": "Not A Kind"}, {"run_id": "../escape"}, {"model_id": "a/b"}, {"tags": "uart"}):
        with pytest.raises(RemoteError) as err:
            daemon.call("observe", {"workspace": ws, "kind": "log", "text": "t", "source": "s", **bad})
        assert err.value.data["name"] == "INVALID_PARAMS"
    assert not (root / "runs/escape").exists()


def test_a_torn_evidence_line_is_skipped_and_reported(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    first = observe(daemon, ws)
    path = root / "data/memory/observations.jsonl"
    with open(path, "ab") as f:
        f.write(b'{"observation_id": "obs_01TORN')  # a crash in the middle of a write
    second = observe(daemon, ws, "after the torn line")
    lines = path.read_text().splitlines()
    assert json.loads(lines[0])["observation_id"] == first and json.loads(lines[-1])["observation_id"] == second
    request = prepare(daemon, ws)
    assert [o["observation_id"] for o in request["request"]["observations"]] == [first, second]
    status = daemon.call("status", {"workspace": ws})["workspaces"][0]["rules"]
    assert any("line 2: not JSON" in e for e in status["errors"])
    problems = daemon.call("validate", {"workspace": ws})["reports"][0]["problems"]
    assert any(p["path"] == "data/memory/observations.jsonl" for p in problems)


# --- constraint violations: each refused with its pointer, nothing written ------------------------------------------


def _broken(oid: str, rid: str, other: str) -> dict[str, tuple[dict[str, Any], str, str]]:
    good = rule(oid)
    return {
        "unknown request": (response("cr_" + "0" * 26, rules=[good]), "/request_id", "no request"),
        "missing confidence": (
            response(rid, rules=[{k: v for k, v in good.items() if k != "confidence"}]),
            "/rules/0",
            "'confidence' is a required property",
        ),
        "confidence out of range": (response(rid, rules=[rule(oid, confidence=1.5)]), "/rules/0/confidence", "1.5"),
        "unknown field": (response(rid, rules=[rule(oid, colour="red")]), "/rules/0", "colour"),
        "no provenance": (
            {**response(rid, rules=[{k: v for k, v in good.items() if k != "provenance"}])},
            "/rules/0",
            "'provenance' is a required property",
        ),
        "empty provenance": (
            response(rid, rules=[rule(oid, provenance={"observation_ids": []})]),
            "/rules/0/provenance/observation_ids",
            "should be non-empty",
        ),
        "summary misses a cited id": (
            {**response(rid, rules=[good]), "provenance_summary": {"observation_ids_used": []}},
            "/provenance_summary/observation_ids_used",
            f"does not list cited {oid}",
        ),
        "invalid fw_range": (response(rid, rules=[rule(oid, fw_range="1.2.**")]), "/rules/0/fw_range", "1.2.**"),
        "bad fact key": (
            response(rid, rules=[rule(oid, facts={"transport uart": 1})]),
            "/rules/0/facts/transport uart",
            "dotted",
        ),
        "duplicate rule id": (response(rid, rules=[good, good]), "/rules/1/rule_id", "also at /rules/0/rule_id"),
        "rule id of another model": (
            response(rid, rules=[rule(oid, rule_id="kx100-rule", model_id="KX-201")]),
            "/rules/0/rule_id",
            "already belongs to model KX-100",
        ),
        "unsafe rule id": (response(rid, rules=[rule(oid, rule_id="../../etc")]), "/rules/0/rule_id", "does not match"),
        "override without instance": (
            response(rid, overrides=[{k: v for k, v in good.items() if k != "rule_id"}]),
            "/overrides/0",
            "'instance_id' is a required property",
        ),
        "candidate cites another workspace's evidence": (
            response(rid, candidates=[rule(other)]),
            "/candidates/0/provenance/observation_ids/0",
            f"unknown observation id {other}",
        ),
        "not an object": (["not", "an", "object"], "", "is not of type 'object'"),  # type: ignore[dict-item]
    }


CASES = [
    "unknown request",
    "missing confidence",
    "confidence out of range",
    "unknown field",
    "no provenance",
    "empty provenance",
    "summary misses a cited id",
    "invalid fw_range",
    "bad fact key",
    "duplicate rule id",
    "rule id of another model",
    "unsafe rule id",
    "override without instance",
    "candidate cites another workspace's evidence",
]


@pytest.fixture
def two_requests(daemon: Daemon, workspace: tuple[Path, str]) -> tuple[Path, str, str, str, str]:
    root, ws = workspace
    seed = observe(daemon, ws, "KX-100 needs even parity", model_id="KX-100")
    compiled(daemon, ws, rule(seed, rule_id="kx100-rule", model_id="KX-100", fw_range="*"))
    oid = observe(daemon, ws)
    other_root = short_tmp("ws")
    other = daemon.call("workspace.add", {"path": str(other_root)})["workspace_id"]
    foreign = observe(daemon, other, "only in the other workspace")
    return root, ws, oid, prepare(daemon, ws)["request_id"], foreign


@pytest.mark.parametrize("case", CASES)
def test_each_violation_is_reported_and_nothing_is_written(
    daemon: Daemon, two_requests: tuple[Path, str, str, str, str], case: str
) -> None:
    root, ws, oid, rid, foreign = two_requests
    resp, where, reason = _broken(oid, rid, foreign)[case]
    snapshot = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    with pytest.raises(RemoteError) as err:
        daemon.call("compile.apply", {"workspace": ws, "response": resp})
    data = err.value.data
    expected = "MEMORY_PROVENANCE_UNKNOWN" if case.startswith("candidate cites") else "MEMORY_COMPILE_INVALID"
    assert data["name"] == expected
    assert any(v["pointer"] == where and reason in v["reason"] for v in data["violations"]), data["violations"]
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == snapshot


def test_every_violation_of_one_response_is_listed(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    _root, ws = workspace
    oid = observe(daemon, ws)
    rid = prepare(daemon, ws)["request_id"]
    bad = response(rid, rules=[rule(oid, confidence=2), rule("obs_" + "1" * 26, rule_id="x", fw_range="nope")])
    with pytest.raises(RemoteError) as err:
        apply(daemon, ws, bad)
    pointers = {v["pointer"] for v in err.value.data["violations"]}
    assert {"/rules/0/confidence", "/rules/1/fw_range", "/rules/1/provenance/observation_ids/0"} <= pointers
    assert err.value.data["count"] == len(err.value.data["violations"])


def test_a_response_of_100000_invalid_items_is_refused_before_it_is_checked(
    daemon: Daemon, workspace: tuple[Path, str]
) -> None:
    """Issue 19, 2.4: 1.8 MB of 100,000 invalid items took 12 s and +1.5 GB checking each one."""
    _root, ws = workspace
    observe(daemon, ws)
    rid = prepare(daemon, ws)["request_id"]
    flood = {"request_id": rid, "rules": [{"x": 1}] * 100_000, "provenance_summary": {"observation_ids_used": []}}
    with pytest.raises(RemoteError) as err:
        apply(daemon, ws, flood)
    assert err.value.data["name"] == "MEMORY_TOO_LARGE" and err.value.data["limit"] == 1000
    assert "1000" in err.value.data["hint"]


def test_the_violations_listed_are_bounded_and_the_rest_counted(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    _root, ws = workspace
    oid = observe(daemon, ws)
    rid = prepare(daemon, ws)["request_id"]
    many_items = {"request_id": rid, "rules": [{"x": 1}] * 1000, "provenance_summary": {"observation_ids_used": []}}
    many_keys = response(rid, rules=[rule(oid, facts={f"not dotted {n}": n for n in range(100_000)})])
    for bad in (many_items, many_keys):
        with pytest.raises(RemoteError) as err:
            apply(daemon, ws, bad)
        data = err.value.data
        assert data["name"] == "MEMORY_COMPILE_INVALID"
        assert len(data["violations"]) == 100 and data["count"] > 1000
        assert f"{data['count']} violation(s)" in err.value.message and "first 100 listed" in err.value.message


# --- policy: low confidence is staged ------------------------------------------------------------------------------


def test_low_confidence_goes_to_candidates_and_promote_reject_move_it(
    daemon: Daemon, workspace: tuple[Path, str]
) -> None:
    root, ws = workspace
    oid = observe(daemon, ws)
    request = prepare(daemon, ws)
    low_rule = rule(oid, rule_id="maybe-reset", fw_range="*", facts={"known_issues.reset_hangs": True}, confidence=0.4)
    low_override = {
        "instance_id": "bench-3",
        "rule_id": "slow-bench",
        "model_id": "KX-200",
        "fw_range": "*",
        "facts": {"transport.timeout_ms": 900},
        "confidence": 0.2,
        "provenance": {"observation_ids": [oid]},
    }
    proposed = rule(oid, rule_id="proposed", facts={"analysis.template": "uart"}, confidence=0.95)
    result = apply(
        daemon, ws, response(request["request_id"], rules=[low_rule], candidates=[proposed], overrides=[low_override])
    )
    assert sorted(result["demoted"]) == ["maybe-reset", "slow-bench"]
    assert not (root / "spec/memory/profiles").exists() and not (root / "data/memory/overrides").exists()
    listed = daemon.call("candidates.list", {"workspace": ws})["candidates"]
    assert sorted(c["rule_id"] for c in listed) == ["maybe-reset", "proposed", "slow-bench"]
    assert resolve(daemon, ws, "1.2.3", "bench-3")["facts"] == {}  # candidates never resolve

    dry = daemon.call("candidates.promote", {"workspace": ws, "rule_id": "maybe-reset", "dry_run": True})
    assert dry["dry_run"] and (root / "spec/memory/candidates/KX-200/maybe-reset.yaml").exists()
    daemon.call("candidates.promote", {"workspace": ws, "rule_id": "maybe-reset", "reason": "reproduced twice"})
    daemon.call("candidates.promote", {"workspace": ws, "rule_id": "slow-bench"})
    daemon.call("candidates.reject", {"workspace": ws, "rule_id": "proposed", "reason": "one-off"})
    assert not (root / "spec/memory/candidates/KX-200/proposed.yaml").exists()
    promoted = yaml.safe_load((root / "spec/memory/profiles/KX-200/maybe-reset.yaml").read_text())
    assert "status" not in promoted and promoted["facts"] == {"known_issues.reset_hangs": True}
    overrides = yaml.safe_load((root / "data/memory/overrides/bench-3.yaml").read_text())
    assert overrides["rules"][0]["rule_id"] == "slow-bench"
    facts = resolve(daemon, ws, "1.2.3", "bench-3")["facts"]
    assert facts == {"known_issues.reset_hangs": True, "transport.timeout_ms": 900}
    ops = [e["op"] for e in history(root)]
    assert ops == ["compile.apply", "candidates.promote", "candidates.promote", "candidates.reject"]
    rejected = history(root)[-1]
    assert rejected["reason"] == "one-off" and (root / rejected["changes"][0]["backup"]).exists()
    with pytest.raises(RemoteError) as err:
        daemon.call("candidates.reject", {"workspace": ws, "rule_id": "proposed"})
    assert err.value.data["name"] == "MEMORY_RULE_NOT_FOUND"


# --- precedence ------------------------------------------------------------------------------------------------------


PRECEDENCE_RULES = [
    ("a-any", "*", 0, "A"),
    ("b-major", "1.*", 0, "B"),
    ("f-major-high", "1.*", 100, "F"),
    ("d-interval", ">=1.2.0 <1.3.0", 0, "D"),
    ("c-minor", "1.2.*", 0, "C"),  # same width and priority as d-interval: the smaller rule_id wins
    ("e-exact", "1.2.5", -5, "E"),  # narrowest: wins despite the lowest priority
]


@pytest.mark.parametrize(
    ("version", "instance", "winner", "beat"),
    [
        ("1.2.5", None, "e-exact", ["c-minor", "d-interval", "f-major-high", "b-major", "a-any"]),
        ("1.2.4", None, "c-minor", ["d-interval", "f-major-high", "b-major", "a-any"]),
        ("1.2.0-rc.1", None, "c-minor", ["d-interval", "f-major-high", "b-major", "a-any"]),
        ("1.3.0-rc.1", None, "f-major-high", ["b-major", "a-any"]),
        ("1.9", None, "f-major-high", ["b-major", "a-any"]),
        ("2.0.0", None, "a-any", []),
        ("1.2.5", "bench-3", "o-bench", ["e-exact", "c-minor", "d-interval", "f-major-high", "b-major", "a-any"]),
        ("2.0.0", "bench-9", "a-any", []),
    ],
)
def test_precedence_table(
    daemon: Daemon, workspace: tuple[Path, str], version: str, instance: str | None, winner: str, beat: list[str]
) -> None:
    _root, ws = workspace
    oid = observe(daemon, ws)
    rules = [
        rule(oid, rule_id=rid, fw_range=rng, priority=prio, facts={"transport.mode": value, f"analysis.{rid}": 1})
        for rid, rng, prio, value in PRECEDENCE_RULES
    ]
    override = {
        "instance_id": "bench-3",
        "rule_id": "o-bench",
        "model_id": "KX-200",
        "fw_range": "*",
        "facts": {"transport.mode": "O"},
        "confidence": 0.9,
        "provenance": {"observation_ids": [oid]},
    }
    compiled(daemon, ws, *rules, overrides=[override])
    answer = resolve(daemon, ws, version, instance)
    trace = answer["trace"]["transport.mode"]
    assert trace["rule_id"] == winner and trace["beat"] == beat
    assert trace["layer"] == ("override" if winner == "o-bench" else "profile")
    assert answer["rules"][-1] == winner
    expected_own = {f"analysis.{rid}" for rid, *_ in PRECEDENCE_RULES if rid in [winner, *beat]}
    assert {k for k in answer["facts"] if k.startswith("analysis.")} == expected_own


def test_resolve_refuses_a_bad_version_and_knows_nothing_of_unknown_models(
    daemon: Daemon, workspace: tuple[Path, str]
) -> None:
    _root, ws = workspace
    with pytest.raises(RemoteError) as err:
        resolve(daemon, ws, "one.two")
    assert err.value.data["name"] == "MEMORY_VERSION_INVALID"
    assert resolve(daemon, ws, "1.0", model="NOPE")["facts"] == {}


# --- hand edits ------------------------------------------------------------------------------------------------------


def test_hand_edits_are_picked_up_and_broken_yaml_keeps_the_last_good_rules(
    daemon: Daemon, workspace: tuple[Path, str]
) -> None:
    root, ws = workspace
    oid = observe(daemon, ws)
    compiled(daemon, ws, rule(oid))
    path = root / PROFILE
    data = yaml.safe_load(path.read_text())
    data["facts"]["transport.uart.baud"] = 460800
    tmp = path.with_name(".edit.tmp")
    tmp.write_text(yaml.safe_dump(data, allow_unicode=True))
    os.replace(tmp, path)  # how editors save
    wait_for(lambda: resolve(daemon, ws, "1.2.3")["facts"]["transport.uart.baud"] == 460800)

    path.write_text("rule_id: [unclosed\n")
    broken = wait_for(lambda: (w := daemon.call("status", {"workspace": ws})["workspaces"][0])["rules"]["errors"] and w)
    assert broken["recommended"] == "memoryctl validate"
    answer = resolve(daemon, ws, "1.2.3")
    assert answer["facts"]["transport.uart.baud"] == 460800  # the last good rule is still in effect
    assert any(PROFILE in e for e in answer["errors"])
    report = daemon.call("validate", {"workspace": ws})["reports"][0]
    assert not report["ok"] and any(p["path"] == PROFILE and p["severity"] == "error" for p in report["problems"])
    # apply refuses to overwrite a file a person is in the middle of fixing
    oid2 = observe(daemon, ws, "more evidence")
    rid = prepare(daemon, ws)["request_id"]
    with pytest.raises(RemoteError) as err:
        apply(daemon, ws, response(rid, rules=[rule(oid2)]))
    assert err.value.data["name"] == "MEMORY_CONFLICT"

    data["fw_range"] = ">=2.0"
    data["facts"] = {"transport": {"uart": {"baud": 230400}}}  # nested facts are read as dotted keys
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    wait_for(lambda: resolve(daemon, ws, "2.1")["facts"].get("transport.uart.baud") == 230400)
    assert resolve(daemon, ws, "1.2.3")["facts"] == {}
    assert not daemon.call("status", {"workspace": ws})["workspaces"][0]["rules"]["errors"]

    path.write_text(path.read_text().replace("fw_range: '>=2.0'", "fw_range: 1.2.**"))
    report = wait_for(lambda: not (r := daemon.call("validate", {"workspace": ws})["reports"][0])["ok"] and r)
    assert any("fw_range" in p["message"] for p in report["problems"])


# --- revisions -------------------------------------------------------------------------------------------------------


def test_revisions_diff_and_fact_merge(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    oid = observe(daemon, ws)
    compiled(daemon, ws, rule(oid))
    oid2 = observe(daemon, ws, "flow control also needed on 1.2.9; parity is even")
    second = compiled(
        daemon,
        ws,
        rule(
            oid2,
            facts={
                "transport.uart.parity": "even",
                "transport.uart.baud": None,
                "transport.uart.flow_control": "rts_cts",
            },
        ),
    )
    assert second["writes"][0]["action"] == "update" and second["writes"][0]["revision"] == 2
    stored = yaml.safe_load((root / PROFILE).read_text())
    assert stored["facts"] == {"transport.uart.flow_control": "rts_cts", "transport.uart.parity": "even"}
    assert stored["provenance"]["observation_ids"] == [oid, oid2] and stored["revision"] == 2
    diff = daemon.call("rules.diff", {"workspace": ws, "rule_id": "uart-flow-control", "from_rev": 1})
    assert diff["to_rev"] == 2
    assert {(c["key"], c["change"]) for c in diff["facts"]} == {
        ("transport.uart.baud", "removed"),
        ("transport.uart.parity", "added"),
    }
    assert "-  transport.uart.baud: 921600" in diff["diff"] and "+  transport.uart.parity: even" in diff["diff"]
    with pytest.raises(RemoteError) as err:
        daemon.call("rules.diff", {"workspace": ws, "rule_id": "uart-flow-control", "from_rev": 7})
    assert err.value.data["name"] == "MEMORY_REVISION_NOT_FOUND"
    shown = daemon.call("rules.show", {"workspace": ws, "rule_id": "uart-flow-control"})
    assert [h["rev_after"] for h in shown["history"]] == [1, 2]


def test_rules_search_and_timeline(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    _root, ws = workspace
    oid = observe(daemon, ws, "串口超时 on KX-200 1.2.3")
    compiled(
        daemon,
        ws,
        rule(oid),
        rule(oid, rule_id="kx-any", fw_range="*", facts={"procedure.boot": "hold reset"}, summary="boot"),
    )
    found = daemon.call("rules.search", {"workspace": ws, "fw_version": "2.0"})["rules"]
    assert [r["rule_id"] for r in found] == ["kx-any"]
    assert (
        daemon.call("rules.search", {"workspace": ws, "query": "串口超时"})["rules"][0]["rule_id"]
        == "uart-flow-control"
    )
    assert daemon.call("rules.search", {"workspace": ws, "model_id": "KX-999"})["total"] == 0
    events = daemon.call("timeline", {"workspace": ws})["events"]
    assert [e["type"] for e in events] == ["change", "observation"]
    assert events[1]["summary"].startswith("串口超时")
    assert daemon.call("timeline", {"workspace": ws, "limit": 1})["truncated"] is True
    assert daemon.call("timeline", {"workspace": ws, "until": "2000-01-01"})["events"] == []
    with pytest.raises(RemoteError) as err:
        daemon.call("timeline", {"workspace": ws, "since": "last tuesday"})
    assert err.value.data["name"] == "INVALID_PARAMS"


# --- chunked evidence, filters, resume -------------------------------------------------------------------------------


def test_large_evidence_is_split_and_an_interrupted_compile_resumes(daemon_factory: Any) -> None:
    d: Daemon = daemon_factory(start=False)
    d.env["MEMORYD_COMPILE_MAX_OBSERVATIONS"] = "2"
    d.start()
    root = short_tmp("ws")
    ws = d.call("workspace.add", {"path": str(root)})["workspace_id"]
    oids = [observe(d, ws, f"reading {n}") for n in range(5)]
    first = prepare(d, ws)
    assert first["chunk"]["index"] == 1 and first["chunk"]["of"] == 3 and first["remaining"] == 2
    assert [o["observation_id"] for o in first["request"]["observations"]] == oids[:2]
    again = prepare(d, ws)
    assert again["resumed"] and again["request_id"] == first["request_id"]
    apply(d, ws, response(first["request_id"], rules=[rule(oids[0])]))
    d.stop()
    d.start()  # an interrupted compile resumes where it stopped
    second = prepare(d, ws)
    assert second["chunk"]["index"] == 2 and second["resumed"]
    assert [o["observation_id"] for o in second["request"]["observations"]] == oids[2:4]
    assert second["request"]["rules"][0]["rule_id"] == "uart-flow-control"  # current rules travel along
    apply(d, ws, response(second["request_id"]))
    third = prepare(d, ws)
    apply(d, ws, response(third["request_id"]))
    assert prepare(d, ws).get("request_id") is None
    state = json.loads((root / "data/memory/compile/state.json").read_text())
    assert state["watermarks"]["global"] == oids[-1] and state["compiled"]["global"] == []
    recompile = prepare(d, ws, since="2000-01-01")
    assert recompile["observation_count"] == 2 and recompile["chunk"]["of"] == 3
    restarted = prepare(d, ws, restart=True, since="2000-01-01")
    assert restarted["request_id"] != recompile["request_id"] and restarted["chunk"]["of"] == 3
    with pytest.raises(RemoteError) as err:  # the abandoned request cannot be applied any more
        apply(d, ws, response(recompile["request_id"]))
    assert "abandoned" in err.value.data["violations"][0]["reason"]


def test_prepare_filters_by_run_and_model(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    _root, ws = workspace
    in_run = observe(daemon, ws, "run evidence", run_id="r-1")
    other_model = observe(daemon, ws, "other model", model_id="KX-300")
    plain = observe(daemon, ws, "plain")
    by_run = prepare(daemon, ws, run_id="r-1")
    assert [o["observation_id"] for o in by_run["request"]["observations"]] == [in_run]
    by_model = prepare(daemon, ws, model_id="KX-300")
    assert [o["observation_id"] for o in by_model["request"]["observations"]] == [other_model]
    apply(daemon, ws, response(by_model["request_id"]))
    rest = prepare(daemon, ws)  # the run's request is still outstanding: only the plain observation is left
    assert [o["observation_id"] for o in rest["request"]["observations"]] == [plain]


# --- crash injection --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("step", ["backups", "journal", "write", "history", "done"])
def test_a_crash_at_any_step_is_repaired_on_restart(daemon_factory: Any, step: str) -> None:
    d: Daemon = daemon_factory()
    root = short_tmp("ws")
    ws = d.call("workspace.add", {"path": str(root)})["workspace_id"]
    oid = observe(d, ws)
    compiled(d, ws, rule(oid, facts={"transport.uart.baud": 115200}))  # revision 1, so the crash replaces a file
    oid2 = observe(d, ws, "second run")
    rid = prepare(d, ws)["request_id"]
    resp = response(
        rid,
        rules=[rule(oid2), rule(oid2, rule_id="kx-boot", fw_range="*", facts={"procedure.boot": "hold reset"})],
    )
    before = (root / PROFILE).read_bytes()
    d.stop()

    d.env["MEMORYD_CRASH_AT"] = step
    d.start()
    with pytest.raises((ClientError, RemoteError)):
        apply(d, ws, resp)
    assert d.proc is not None and d.proc.wait(10) == 86
    d.stop()
    del d.env["MEMORYD_CRASH_AT"]
    d.start()
    status = d.call("status", {"workspace": ws})["workspaces"][0]["rules"]
    assert not list((root / "data/memory/journal").glob("*.json"))
    entries = history(root)
    if step == "backups":  # before the commit point: rolled back, as if never applied
        assert (root / PROFILE).read_bytes() == before and len(entries) == 1
        assert not (root / "spec/memory/profiles/KX-200/kx-boot.yaml").exists()
        assert not (root / "data/memory/backups").exists() or not any((root / "data/memory/backups").iterdir())
        assert apply(d, ws, resp)["applied"]
    else:  # after it: rolled forward, exactly once
        assert status["recovered"] == ([] if step == "done" else [entries[-1]["run_id"]])
        assert len(entries) == 2
        assert apply(d, ws, resp)["already_applied"]
    stored = yaml.safe_load((root / PROFILE).read_text())
    assert stored["revision"] == 2 and stored["facts"]["transport.uart.flow_control"] == "rts_cts"
    assert resolve(d, ws, "1.2.3")["facts"]["procedure.boot"] == "hold reset"
    assert len(history(root)) == 2
    backup = root / history(root)[-1]["changes"][-1]["backup"]
    assert backup.read_bytes() == before


def test_rules_are_per_workspace_and_readable_with_get(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    _root, ws = workspace
    compiled(daemon, ws, rule(observe(daemon, ws)))
    other_root = short_tmp("ws")
    other = daemon.call("workspace.add", {"path": str(other_root)})["workspace_id"]
    assert resolve(daemon, other, "1.2.3")["facts"] == {}
    assert daemon.call("rules.search", {"workspace": other})["total"] == 0
    with pytest.raises(RemoteError) as err:
        daemon.call("rules.show", {"workspace": other, "rule_id": "uart-flow-control"})
    assert err.value.data["name"] == "MEMORY_RULE_NOT_FOUND"
    text = daemon.call("get", {"workspace": ws, "path": PROFILE})["text"]
    assert text.startswith("rule_id: uart-flow-control\n")
    for path in ("data/memory/observations.jsonl", "data/memory/history.jsonl", "spec/memory/../../x.yaml"):
        with pytest.raises(RemoteError) as err:
            daemon.call("get", {"workspace": ws, "path": path})
        assert err.value.data["name"] == "MEMORY_PATH_TRAVERSAL"
    with pytest.raises(RemoteError) as err:  # writes never take the owner's cross-workspace scope
        daemon.call("observe", {"workspace": ws, "scope": "all", "kind": "log", "text": "t", "source": "s"})
    assert err.value.data["name"] == "MEMORY_FORBIDDEN"


def test_a_large_change_is_indexed_in_the_background(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    _root, ws = workspace
    oid = observe(daemon, ws)
    many = [rule(oid, rule_id=f"bulk-{n:03d}", facts={f"analysis.metric_{n:03d}": n}) for n in range(60)]
    result = compiled(daemon, ws, *many)
    assert len(result["writes"]) == 60  # more than are indexed inside the call
    first = daemon.call("search", {"workspace": ws, "query": "analysis.metric_059"})
    target = "spec/memory/profiles/KX-200/bulk-059.yaml"
    if target not in [h["path"] for h in first["hits"]]:  # not indexed yet: then the answer must say so
        assert first["stale"] is True and target in first["pending"], first

    def top() -> str | None:  # other bulk files share the words "analysis" and "metric": wait for the exact one
        hits = daemon.call("search", {"workspace": ws, "query": "analysis.metric_059"})["hits"]
        return hits[0]["path"] if hits and hits[0]["path"] == target else None

    assert wait_for(top) == target


def test_without_a_watcher_resolve_reads_hand_edits_itself(daemon_factory: Any) -> None:
    d: Daemon = daemon_factory(start=False)
    d.env["MEMORYD_WATCH"] = "0"
    d.start()
    root = short_tmp("ws")
    ws = d.call("workspace.add", {"path": str(root)})["workspace_id"]
    compiled(d, ws, rule(observe(d, ws)))
    path = root / PROFILE
    path.write_text(path.read_text().replace("transport.uart.baud: 921600", "transport.uart.baud: 57600"))
    assert resolve(d, ws, "1.2.3")["facts"]["transport.uart.baud"] == 57600  # no waiting: nothing else would notice


def test_a_second_save_right_after_a_hand_edit_is_never_overwritten(
    daemon: Daemon, workspace: tuple[Path, str]
) -> None:
    """The hand-edit recorder records a revision only once the file has been quiet for a moment, and never writes
    the file: the person's last save is what stays, byte for byte."""
    root, ws = workspace
    compiled(daemon, ws, rule(observe(daemon, ws)))
    path = root / PROFILE
    original = path.read_text()
    path.write_text(original.replace("921600", "460800"))  # a save
    wait_for(lambda: resolve(daemon, ws, "1.2.3")["facts"]["transport.uart.baud"] == 460800)
    path.write_text(original.replace("921600", "230400"))  # and another, right after the daemon saw the first
    wait_for(lambda: [h for h in history(root) if h["op"] == "hand_edit"])  # recorded
    assert path.read_text() == original.replace("921600", "230400")
    shown = daemon.call("rules.show", {"workspace": ws, "rule_id": "uart-flow-control"})
    assert shown["rule"]["revision"] >= 2 and shown["rule"]["facts"]["transport.uart.baud"] == 230400
    assert resolve(daemon, ws, "1.2.3")["facts"]["transport.uart.baud"] == 230400


def test_a_yaml_typo_names_its_line_and_the_parsers_reason(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    root, ws = workspace
    compiled(daemon, ws, rule(observe(daemon, ws)))
    path = root / PROFILE
    lines = [
        "rule_id: uart-flow-control",
        "model_id: KX-200",
        "fw_range: '>=1.2.0 <1.3.0'",
        "priority: 10",
        "facts:",
        "  transport.uart.baud 921600",  # line 6: the colon is missing
        "  transport.uart.flow_control: rts_cts",
        "confidence: 0.9",
    ]
    path.write_text("\n".join(lines) + "\n")
    errors = wait_for(lambda: resolve(daemon, ws, "1.2.3")["errors"])
    [error] = errors
    assert error.startswith(f"{PROFILE}: line 6: not valid YAML: mapping values are not allowed"), errors
    report = daemon.call("validate", {"workspace": ws})["reports"][0]
    [problem] = [p for p in report["problems"] if p["path"] == PROFILE]
    assert problem["line"] == 6 and "mapping values are not allowed" in problem["message"], problem
    shown = daemon.memoryctl("resolve", "--model-id", "KX-200", "--fw-version", "1.2.3", cwd=root)
    assert shown.returncode == 0, shown.stderr
    assert f"kept the last good version of {PROFILE}: line 6: not valid YAML" in shown.stdout, shown.stdout
    assert "skipped invalid rule file" not in shown.stdout
    # an unclosed bracket: the line it opened on, and what the parser expected
    path.write_text("rule_id: uart-flow-control\nmodel_id: KX-200\nfacts: {a: 1\nconfidence: 0.9\n")
    errors = wait_for(lambda: (e := resolve(daemon, ws, "1.2.3")["errors"]) and "line 3" in e[0] and e)
    assert "not valid YAML: " in errors[0] and "expected" in errors[0], errors


def test_rule_files_written_right_after_workspace_add_are_loaded(daemon_factory: Any) -> None:
    """Issue 19 §4: rule files written into a freshly created spec/memory tree right after `workspace.add` (as
    `memoryctl init` then a `git checkout` or a script do) could fall between the rules' first load and the
    watcher's arming, and stay unloaded until the periodic reconcile (30 s). The reconcile interval is an hour here:
    only a pass after the watcher is armed can load them."""
    d: Daemon = daemon_factory(start=False)
    d.env["MEMORYD_RECONCILE_INTERVAL_S"] = "3600"
    d.start()
    source = short_tmp("ws")
    first = d.call("workspace.add", {"path": str(source)})["workspace_id"]
    compiled(d, first, rule(observe(d, first)))
    text = (source / PROFILE).read_text()
    roots = []
    for n in range(8):
        root = short_tmp("ws")
        ws = d.call("workspace.add", {"path": str(root)})["workspace_id"]
        target = root / PROFILE
        target.parent.mkdir(parents=True)
        target.write_text(text.replace("921600", str(9600 + n)))
        roots.append((ws, n))
    for ws, n in roots:
        # bounded: well under the reconcile interval, far over a load (milliseconds)
        wait_for(lambda ws=ws, n=n: resolve(d, ws, "1.2.3")["facts"].get("transport.uart.baud") == 9600 + n, 15)


@pytest.mark.parametrize("step", ["journal", "history", "done"])
def test_a_crash_while_recording_a_hand_edit_never_touches_the_file(daemon_factory: Any, step: str) -> None:
    """A hand edit's record has nothing to write (the file is already as the person saved it): a crash after its
    commit point is finished on restart, history gets the line once, and the file's bytes and mtime stay."""
    d: Daemon = daemon_factory()
    root = short_tmp("ws")
    ws = d.call("workspace.add", {"path": str(root)})["workspace_id"]
    compiled(d, ws, rule(observe(d, ws)))
    d.stop()
    d.env["MEMORYD_CRASH_AT"] = step
    d.env["MEMORYD_WATCH"] = "0"  # no watcher: the next change records the edit, at a moment the test chooses
    d.start()
    resolve(d, ws, "1.2.3")  # the rules are loaded: an edit from now on is a hand edit
    path = root / PROFILE
    saved = path.read_bytes().replace(b"921600", b"460800")
    path.write_bytes(saved)
    mtime = path.stat().st_mtime_ns
    resolve(d, ws, "1.2.3")  # without a watcher, resolve reads the files: the edit is noticed
    with pytest.raises((ClientError, RemoteError)):
        observe(d, ws, "a new run")
        prepare(d, ws)  # records the hand edit first, and crashes while doing so
    assert d.proc is not None and d.proc.wait(20) == 86
    d.stop()
    del d.env["MEMORYD_CRASH_AT"]
    d.start()
    recovered = d.call("status", {"workspace": ws})["workspaces"][0]["rules"]["recovered"]  # opened: recovered
    assert not list((root / "data/memory/journal").glob("*.json"))
    assert [h["op"] for h in history(root)] == ["compile.apply", "hand_edit"]
    assert recovered == ([] if step == "done" else [history(root)[-1]["run_id"]])
    shown = d.call("rules.show", {"workspace": ws, "rule_id": "uart-flow-control"})
    assert shown["rule"]["revision"] == 2 and shown["rule"]["facts"]["transport.uart.baud"] == 460800
    assert path.read_bytes() == saved and path.stat().st_mtime_ns == mtime
