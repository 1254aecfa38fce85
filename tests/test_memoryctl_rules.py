"""memoryctl verbs for evidence to rules: observe, compile prepare/apply, resolve, rules, timeline, candidates."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import Daemon, short_tmp

MEMORYCTL = [sys.executable, "-m", "memoryctl"]

OBS_ID = re.compile(r"^obs_[0-9A-HJKMNP-TV-Z]{26}$")
PROFILE = "spec/memory/profiles/dvk-a1/uart-baud.yaml"


def ok(out: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The data of a successful --json run."""
    assert out.returncode == 0, out.stderr
    envelope = json.loads(out.stdout)
    assert envelope["ok"] is True and set(envelope) == {"ok", "data"}
    data: dict[str, Any] = envelope["data"]
    return data


def observe(daemon: Daemon, cwd: Path, text: str, *extra: str) -> str:
    out = daemon.memoryctl("observe", text, "--kind", "test_result", "--source", "pytest", *extra, cwd=cwd)
    assert out.returncode == 0, out.stderr
    observation_id = out.stdout.strip()
    assert OBS_ID.match(observation_id), out.stdout
    return observation_id


def prepare(daemon: Daemon, cwd: Path) -> str:
    data = ok(daemon.memoryctl("--json", "compile", "prepare", cwd=cwd))
    assert data["request_id"], data
    request_id: str = data["request_id"]
    return request_id


def proposal(rule_id: str, facts: dict[str, Any], confidence: float, *cited: str, **extra: Any) -> dict[str, Any]:
    return {
        "rule_id": rule_id,
        "model_id": "dvk-a1",
        "fw_range": "1.2.*",
        "facts": facts,
        "confidence": confidence,
        "provenance": {"observation_ids": list(cited)},
        **extra,
    }


def response_file(
    where: Path, request_id: str, rules: list[dict[str, Any]], candidates: list[dict[str, Any]] | None = None
) -> Path:
    cited = sorted({o for item in rules + (candidates or []) for o in item["provenance"]["observation_ids"]})
    response = {
        "request_id": request_id,
        "rules": rules,
        "candidates": candidates or [],
        "provenance_summary": {"observation_ids_used": cited},
    }
    path = where / f"response-{request_id}.json"
    path.write_text(json.dumps(response, ensure_ascii=False, indent=2), encoding="utf-8")
    return path


def test_evidence_to_rules_round_trip(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    project, workspace_id = workspace
    scratch = short_tmp("resp")

    # observe: the human output is the id alone; Chinese text, tags and data go through unchanged
    first = observe(
        daemon,
        project,
        "串口超时：波特率 921600 时丢帧，115200 稳定",
        "--run-id",
        "run-1",
        "--model-id",
        "dvk-a1",
        "--fw-version",
        "1.2.3",
        "--tag",
        "uart",
        "--tag",
        "串口",
        "--data",
        '{"baud": 115200, "结论": "稳定"}',
    )
    piped = ok(
        daemon.memoryctl(
            "--json", "observe", "-", "--kind", "log", "--source", "claude-code", "--model-id", "dvk-a1",
            cwd=project, input="重试三次后恢复\n",
        )
    )  # fmt: skip
    second = piped["observation_id"]
    assert OBS_ID.match(second) and piped["path"]
    dry = daemon.memoryctl("observe", "maybe", "--kind", "log", "--source", "me", "--dry-run", cwd=project)
    assert dry.returncode == 0 and dry.stdout.startswith("would append obs_"), dry.stderr

    # compile prepare --out: the request as pretty UTF-8 JSON, with the evidence in it
    request_file = scratch / "compile_request.json"
    prepared = daemon.memoryctl("compile", "prepare", "--out", str(request_file), cwd=project)
    assert prepared.returncode == 0, prepared.stderr
    request_id = re.search(r"^request (cr_\w+)", prepared.stdout, re.M)
    assert request_id, prepared.stdout
    assert re.search(r"observations\s+2$", prepared.stdout, re.M) and re.search(r"chunk\s+1/1$", prepared.stdout, re.M)
    assert re.search(r"remaining\s+0$", prepared.stdout, re.M) and "path " in prepared.stdout
    raw = request_file.read_text(encoding="utf-8")
    assert "串口超时" in raw and raw.startswith("{\n  ")
    request = json.loads(raw)
    assert request["request_id"] == request_id[1]
    assert {o["observation_id"] for o in request["observations"]} == {first, second}
    again = ok(daemon.memoryctl("--json", "compile", "prepare", cwd=project))
    assert again["request_id"] == request_id[1] and again["request"]["request_id"] == request_id[1]

    # compile apply: one confident rule, one that is demoted to a candidate; dry run first
    answer = response_file(
        scratch,
        request_id[1],
        [
            proposal(
                "uart-baud",
                {"transport.uart.baud": 115200, "known_issues.uart.note": "波特率 921600 时丢帧"},
                0.9,
                first,
                priority=5,
                summary="串口用 115200",
            ),
            proposal("uart-retry", {"transport.uart.retries": 3}, 0.3, second),
        ],
    )
    planned = daemon.memoryctl("compile", "apply", "--in", str(answer), "--dry-run", cwd=project)
    assert planned.returncode == 0, planned.stderr
    assert planned.stdout.startswith(f"dry run of {request_id[1]}: nothing written")
    assert re.search(rf"^create\s+{re.escape(PROFILE)}  uart-baud rev 1$", planned.stdout, re.M), planned.stdout
    assert "demoted to candidates (low confidence): " in planned.stdout and "uart-retry" in planned.stdout
    assert not (project / PROFILE).exists()
    applied = ok(daemon.memoryctl("--json", "compile", "apply", "--in", str(answer), cwd=project))
    assert applied["applied"] is True and applied["run_id"]
    assert any(w["path"] == PROFILE and w["action"] == "create" for w in applied["writes"])
    assert any("uart-retry" in d for d in applied["demoted"])
    assert "115200" in (project / PROFILE).read_text(encoding="utf-8")

    # resolve: every fact with the rule that set it; Chinese values round-trip
    resolved = daemon.memoryctl("resolve", "--model-id", "dvk-a1", "--fw-version", "1.2.3", cwd=project)
    assert resolved.returncode == 0, resolved.stderr
    lines = resolved.stdout.splitlines()
    assert lines[1:3] == [
        'known_issues.uart.note = "波特率 921600 时丢帧"    (uart-baud, profile, 1.2.*, priority 5)',
        "transport.uart.baud = 115200    (uart-baud, profile, 1.2.*, priority 5)",
    ]
    facts = ok(
        daemon.memoryctl("--json", "resolve", "--model-id", "dvk-a1", "--fw-version", "1.2.3", "-w", workspace_id)
    )
    assert facts["facts"]["known_issues.uart.note"] == "波特率 921600 时丢帧"
    assert facts["trace"]["transport.uart.baud"]["rule_id"] == "uart-baud"

    # a second compile: a new revision of uart-baud, and a candidate to reject later
    third = observe(daemon, project, "921600 在新线缆上稳定", "--model-id", "dvk-a1")
    answer = response_file(
        scratch,
        prepare(daemon, project),
        [proposal("uart-baud", {"transport.uart.baud": 921600}, 0.95, third, priority=5)],
        [proposal("uart-flow", {"transport.uart.flow_control": "rts/cts"}, 0.5, third)],
    )
    updated = daemon.memoryctl("compile", "apply", "--in", "-", cwd=project, input=answer.read_text("utf-8"))
    assert updated.returncode == 0, updated.stderr
    assert re.search(rf"^update\s+{re.escape(PROFILE)}  uart-baud rev 2$", updated.stdout, re.M), updated.stdout

    # rules search / show / diff
    found = daemon.memoryctl("rules", "search", "uart", "--model-id", "dvk-a1", "--fw-version", "1.2.3", cwd=project)
    assert found.returncode == 0, found.stderr
    assert re.search(r"^uart-baud  profile  dvk-a1 1\.2\.\*  rev 2  confidence 0\.95  priority 5$", found.stdout, re.M)
    candidates = ok(daemon.memoryctl("--json", "rules", "search", "--layer", "candidate", "--limit", "10", cwd=project))
    assert {r["rule_id"] for r in candidates["rules"]} == {"uart-retry", "uart-flow"}
    shown = daemon.memoryctl("rules", "show", "uart-baud", cwd=project)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"uart-baud  profile  {PROFILE}")
    assert "transport.uart.baud = 921600" in shown.stdout and "history:" in shown.stdout
    assert f"{third}  " in shown.stdout and "921600 在新线缆上稳定" in shown.stdout
    diff = daemon.memoryctl("rules", "diff", "uart-baud", "--from", "1", "--to", "2", cwd=project)
    assert diff.returncode == 0, diff.stderr
    assert re.search(r"^-.*115200", diff.stdout, re.M) and re.search(r"^\+.*921600", diff.stdout, re.M)
    changes = ok(daemon.memoryctl("--json", "rules", "diff", "uart-baud", "--from", "1", cwd=project))
    assert changes["to_rev"] == 2 and {"key": "transport.uart.baud", "before": 115200, "after": 921600} in [
        {k: c[k] for k in ("key", "before", "after")} for c in changes["facts"]
    ]

    # timeline: observations and changes, newest first
    timeline = daemon.memoryctl("timeline", cwd=project)
    assert timeline.returncode == 0, timeline.stderr
    for observation_id in (first, second, third):
        assert re.search(rf"  observation  {observation_id}  ", timeline.stdout), timeline.stdout
    assert re.search(rf"  change\s+{applied['run_id']}  ", timeline.stdout), timeline.stdout
    limited = ok(daemon.memoryctl("--json", "timeline", "--limit", "2", "--run-id", "run-1", cwd=project))
    assert [e["id"] for e in limited["events"]] == [first] and limited["truncated"] is False

    # candidates: list, promote (dry run first), reject
    listed = daemon.memoryctl("candidates", "list", "--model-id", "dvk-a1", cwd=project)
    assert "uart-retry  candidate  dvk-a1" in listed.stdout and "uart-flow  candidate" in listed.stdout
    would = daemon.memoryctl("candidates", "promote", "uart-retry", "--dry-run", cwd=project)
    assert would.returncode == 0 and would.stdout.startswith("would promote uart-retry (dry run"), would.stderr
    promoted = daemon.memoryctl("candidates", "promote", "uart-retry", "--reason", "复测通过", cwd=project)
    assert promoted.returncode == 0 and promoted.stdout.startswith("promoted uart-retry (run "), promoted.stderr
    assert "spec/memory/profiles/dvk-a1/uart-retry.yaml" in promoted.stdout
    rejected = ok(daemon.memoryctl("--json", "candidates", "reject", "uart-flow", "--model-id", "dvk-a1", cwd=project))
    assert rejected["rule_id"] == "uart-flow" and rejected["run_id"]
    assert ok(daemon.memoryctl("--json", "candidates", "list", cwd=project))["candidates"] == []
    assert daemon.memoryctl("candidates", "list", cwd=project).stdout.strip() == "no candidates"
    final = ok(daemon.memoryctl("--json", "resolve", "--model-id", "dvk-a1", "--fw-version", "1.2.9", cwd=project))
    assert final["facts"]["transport.uart.retries"] == 3
    status = daemon.memoryctl("status", cwd=project)
    assert re.search(
        r"  rules: \d+ profile, 0 override, 0 candidate; \d+ observations, 0 compile request", status.stdout
    )


def test_invalid_responses_print_their_violations(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    project, _ = workspace
    scratch = short_tmp("resp")
    cited = observe(daemon, project, "证据", "--model-id", "dvk-a1")
    request_id = prepare(daemon, project)
    bad = response_file(scratch, request_id, [proposal("r1", {"transport.uart.baud": 1}, 1.5, cited)])
    human = daemon.memoryctl("compile", "apply", "--in", str(bad), cwd=project)
    assert human.returncode == 1 and human.stdout == ""
    assert "memoryctl: MEMORY_COMPILE_INVALID: " in human.stderr
    assert re.search(r"^  - /rules/0/confidence: .+$", human.stderr, re.M), human.stderr
    machine = daemon.memoryctl("--json", "compile", "apply", "--in", str(bad), cwd=project)
    error = json.loads(machine.stdout)
    assert machine.returncode == 1 and error["ok"] is False
    assert error["error"]["name"] == "MEMORY_COMPILE_INVALID" and error["error"]["hint"]
    assert any(v["pointer"] == "/rules/0/confidence" and v["reason"] for v in error["error"]["violations"])

    unknown = "obs_" + "0" * 26
    stranger = response_file(scratch, request_id, [proposal("r1", {"transport.uart.baud": 1}, 0.9, unknown)])
    out = daemon.memoryctl("compile", "apply", "--in", str(stranger), cwd=project)
    assert out.returncode == 1 and "MEMORY_PROVENANCE_UNKNOWN" in out.stderr
    assert re.search(rf"^  - /rules/0/provenance/observation_ids/0: .*{unknown}.*$", out.stderr, re.M), out.stderr


def test_nothing_to_compile(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    project, _ = workspace
    target = project / "request.json"
    out = daemon.memoryctl("compile", "prepare", "--out", str(target), cwd=project)
    assert out.returncode == 0 and out.stdout.strip() == "nothing to compile (no new observations)", out.stderr
    assert not target.exists()
    assert ok(daemon.memoryctl("--json", "compile", "prepare", cwd=project)).get("request_id") is None
    assert daemon.memoryctl("timeline", cwd=project).stdout.strip() == "no events"


def test_prepare_out_failure_keeps_the_request(daemon: Daemon, workspace: tuple[Path, str]) -> None:
    project, _ = workspace
    observe(daemon, project, "证据")
    missing_dir = project / "no" / "such" / "dir.json"
    failed = daemon.memoryctl("--json", "compile", "prepare", "--out", str(missing_dir), cwd=project)
    error = json.loads(failed.stdout)["error"]
    assert failed.returncode == 1 and error["name"] == "OUTPUT_FAILED" and "dir.json" in error["message"]
    target = project / "request.json"
    again = ok(daemon.memoryctl("--json", "compile", "prepare", "--out", str(target), cwd=project))
    assert again["resumed"] is True and json.loads(target.read_text("utf-8")) == again["request"]


# --- no daemon: usage errors are found before anything is sent (exit 2, not 3 for an absent daemon) ---------------


def test_usage_errors_send_nothing(daemon_factory: Any) -> None:
    offline: Daemon = daemon_factory(start=False)
    scratch = short_tmp("resp")
    (scratch / "broken.json").write_text('{"request_id": ', encoding="utf-8")
    (scratch / "list.json").write_text("[]", encoding="utf-8")
    (scratch / "nan.json").write_text('{"x": NaN}', encoding="utf-8")

    broken = offline.memoryctl("compile", "apply", "--in", str(scratch / "broken.json"))
    assert broken.returncode == 2 and broken.stdout == ""
    assert f"memoryctl: USAGE: {scratch / 'broken.json'} is not valid JSON: " in broken.stderr
    assert "nothing was sent" in broken.stderr
    for name, message in (("list.json", "must hold a JSON object, not list"), ("nan.json", "NaN is not JSON")):
        out = offline.memoryctl("--json", "compile", "apply", "--in", str(scratch / name))
        error = json.loads(out.stdout)["error"]
        assert out.returncode == 2 and error["name"] == "USAGE" and message in error["message"], out.stdout
    stdin = offline.memoryctl("compile", "apply", "--in", "-", input="not json")
    assert stdin.returncode == 2 and "standard input is not valid JSON" in stdin.stderr
    missing = offline.memoryctl("compile", "apply", "--in", str(scratch / "absent.json"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr
    data = offline.memoryctl("observe", "x", "--kind", "log", "--source", "me", "--data", "[1, 2]")
    assert data.returncode == 2 and "--data must hold a JSON object" in data.stderr
    for argv in (
        ("observe", "x", "--kind", "log"),  # --source is required
        ("compile", "apply"),  # --in is required
        ("compile",),  # an action is required
        ("resolve", "--model-id", "dvk-a1"),  # --fw-version is required
        ("rules", "diff", "r1", "--from", "one"),
        ("rules", "search", "--layer", "shared"),
        ("timeline", "--limit", "many"),
        ("candidates", "promote"),
    ):
        assert offline.memoryctl(*argv).returncode == 2, argv
    absent = offline.memoryctl("--json", "rules", "search")  # well-formed: it gets as far as the socket
    assert absent.returncode == 3 and json.loads(absent.stdout)["error"]["name"] == "DAEMON_UNAVAILABLE"


def test_hostile_arguments_and_inputs_are_usage_errors_not_tracebacks(daemon_factory: Any) -> None:
    """Issue 19, 2.10: non-UTF-8 arguments and deeply nested --data printed tracebacks; --in /dev/zero grew to
    8.8 GB. Each is a USAGE error now, and nothing is sent."""
    offline: Daemon = daemon_factory(start=False)
    deep = '{"a":' * 3000 + "1" + "}" * 3000
    for argv, message in (
        (("search", "ab\udcffcd"), "an argument is not UTF-8 text: ab\\xffcd"),  # b"ab\xffcd" on the command line
        (("remember", "\udcfe"), "an argument is not UTF-8 text: \\xfe"),
        (("observe", "x", "--kind", "log", "--source", "me", "--data", deep), "--data is nested too deeply"),
        (("compile", "apply", "--in", "/dev/zero"), "/dev/zero is larger than 8 MiB"),
    ):
        out = offline.memoryctl("--json", *argv, timeout=60)
        assert out.returncode == 2 and "Traceback" not in out.stderr, (argv, out.stderr[-500:])
        error = json.loads(out.stdout)["error"]
        assert error["name"] == "USAGE" and message in error["message"], (argv, error)
    for verb in (("remember", "-"), ("observe", "-", "--kind", "log", "--source", "me")):
        raw = subprocess.run([*MEMORYCTL, *verb], input=b"ab\xffcd", capture_output=True, env=offline.env, timeout=60)
        assert raw.returncode == 2 and b"standard input is not UTF-8 text" in raw.stderr, (verb, raw.stderr)
    with open("/dev/zero", "rb") as zero:
        big = subprocess.run(
            [*MEMORYCTL, "compile", "apply", "--in", "-"], stdin=zero, capture_output=True, env=offline.env, timeout=60
        )
    assert big.returncode == 2 and b"standard input is larger than 8 MiB" in big.stderr


def test_help_describes_the_rule_verbs(daemon_factory: Any) -> None:
    offline: Daemon = daemon_factory(start=False)
    top = offline.memoryctl("--help").stdout
    for verb in ("observe", "compile", "resolve", "rules", "timeline", "candidates"):
        assert re.search(rf"^    {verb}\s+\S", top, re.M), verb
    for argv, words in (
        (("compile", "--help"), ("prepare", "apply")),
        (("rules", "--help"), ("search", "show", "diff")),
        (("candidates", "--help"), ("list", "promote", "reject")),
        (("compile", "prepare", "--help"), ("--run-id", "--model-id", "--since", "--restart", "--out")),
        (("compile", "apply", "--help"), ("--in FILE", "--dry-run")),
        (("observe", "--help"), ("--kind", "--source", "--tag", "--data", "--fw-version", "--workspace")),
        (("rules", "diff", "--help"), ("--from REV", "--to REV", "RULE_ID")),
        (("timeline", "--help"), ("--since", "--until", "--run-id", "--limit")),
    ):
        out = offline.memoryctl(*argv)
        assert out.returncode == 0, argv
        for word in words:
            assert word in out.stdout, (argv, word)
