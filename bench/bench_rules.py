"""Rules benchmark (evidence → rules): resolve p50/p99 over a large rule set, in-process and through the daemon,
cold (first call per key after a reload) and warm (cached); the load time of the rule files; compile.apply of a
large response (apply, dry_run, idempotent re-apply); observe p50/p99.

Targets on 2 cores: resolve p50 ≤ 1 ms; compile.apply of a 500-rule response ≤ 2 s.
Run: .venv/bin/python bench/bench_rules.py [--rules 10000] [--models 100] [--quick]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
from common import ROOT, Rpc, conditions, daemon, env_for, pct, wait_socket

sys.path.insert(0, str(ROOT))

from memoryd import ids
from memoryd.config import Dirs
from memoryd.rules.models import Rule
from memoryd.rules.ruleset import RuleSet, overrides_yaml, rule_yaml
from memoryd.store.prepare import OVERRIDES, PROFILES

FAMILIES = ["stm32f407-disco", "nrf52840-dk", "esp32-s3-devkitc", "rp2040-pico", "imxrt1062-evk", "sam-e54-xpro"]
# Overlapping ranges, wide to narrow; a model's rules cycle through them (repeats make ties on width).
RANGES = [
    "*",
    "1.*",
    "2.*",
    "1.2.*",
    "1.3.*",
    "2.0.*",
    ">=1.2.0 <1.3.0",
    ">=1.0 <2.0",
    ">=1.2.4",
    "<1.2.0",
    "1.2.3",
    "1.2.5",
    "1.3.0",
    "1.3.0-rc.1",
    "2.0.1",
    "1.1.9",
]
VERSIONS = ["1.2.3", "1.2.4", "1.2.5", "1.3.0", "1.3.0-rc.1", "1.3.2", "2.0.1", "2.1", "1.1.9", "0.9.0"]
INSTANCES = ["bench-a", "bench-b", "desk-c"]
PRIORITIES = [0, 0, 0, 0, 10, 20, 50, -10, 100]
ISSUES = ["uart-overrun", "i2c-clock-stretch", "usb-enum-fail", "brownout-reset", "flash-ecc", "dma-underrun"]
FACTS: list[tuple[str, Callable[[random.Random], Any]]] = [
    ("transport.uart.baud", lambda r: r.choice([9600, 115200, 460800, 921600, 1000000])),
    ("transport.uart.parity", lambda r: r.choice(["none", "even", "odd"])),
    ("transport.uart.flow_control", lambda r: r.random() < 0.5),
    ("transport.i2c.address", lambda r: f"0x{r.randrange(0x08, 0x78):02x}"),
    ("transport.i2c.clock_hz", lambda r: r.choice([100_000, 400_000, 1_000_000])),
    ("transport.spi.mode", lambda r: r.randrange(4)),
    ("transport.spi.clock_hz", lambda r: r.choice([1_000_000, 8_000_000, 24_000_000])),
    ("transport.timeout_ms", lambda r: r.choice([50, 100, 250, 1000, 5000])),
    ("transport.retries", lambda r: r.randrange(6)),
    ("transport.usb.vid_pid", lambda r: f"{r.randrange(0x10000):04x}:{r.randrange(0x10000):04x}"),
    ("procedure.flash.sequence", lambda r: r.sample(["hold BOOT0", "reset", "erase", "dfu-util -a 0", "verify"], 3)),
    ("procedure.reset.hold_ms", lambda r: r.choice([10, 50, 100, 500])),
    ("procedure.boot.wait_ms", lambda r: r.choice([200, 500, 1500])),
    ("procedure.erase.before_flash", lambda r: r.random() < 0.5),
    ("analysis.template", lambda r: r.choice(["uart-throughput", "power-profile", "boot-timing", "sensor-drift"])),
    ("analysis.metrics", lambda r: r.sample(["latency_p99", "crc_errors", "current_ua", "boot_ms", "drop_rate"], 2)),
    ("analysis.sample_rate_hz", lambda r: r.choice([10, 100, 1000])),
    ("calibration.adc.offset_mv", lambda r: round(r.uniform(-15, 15), 2)),
    ("calibration.adc.gain", lambda r: round(r.uniform(0.97, 1.03), 4)),
    ("calibration.temp.offset_c", lambda r: round(r.uniform(-2, 2), 2)),
    ("calibration.rtc.ppm", lambda r: r.randrange(-40, 40)),
    *[(f"known_issues.{i}.description", lambda r, i=i: f"{i} seen under load; see run logs") for i in ISSUES],
    *[
        (f"known_issues.{i}.workaround", lambda r: r.choice(["lower the baud", "add a retry", "power-cycle"]))
        for i in ISSUES
    ],
]


# --- a workspace with many rules ------------------------------------------------------------------------------


def model_ids(count: int) -> list[str]:
    return [f"{FAMILIES[i % len(FAMILIES)]}-r{i:03d}" for i in range(count)]


def make_rule(rng: random.Random, rule_id: str, model: str, fw_range: str, now: str, cites: list[str]) -> Rule:
    keys = rng.sample(FACTS, rng.randint(3, 8))
    return Rule(
        rule_id=rule_id,
        model_id=model,
        fw_range=fw_range,
        priority=rng.choice(PRIORITIES),
        summary=f"{keys[0][0].split('.')[0]} facts for {model} firmware {fw_range}",
        facts={key: make(rng) for key, make in keys},
        confidence=round(rng.uniform(0.7, 1.0), 2),
        provenance={"observation_ids": rng.sample(cites, rng.randint(1, 3))},  # type: ignore[arg-type]
        revision=1,
        created_at=now,
        updated_at=now,
    )


def write_workspace(root: Path, rules: int, models: int, seed: int = 7) -> tuple[int, int]:
    """rule files under spec/memory/profiles and a few override files; returns (profile rules, override rules)."""
    rng = random.Random(seed)
    now = ids.iso(datetime.now())
    cites = [ids.new_id("obs") for _ in range(200)]
    names = model_ids(models)
    for n in range(rules):
        model = names[n % models]
        index = n // models
        fw_range = RANGES[(index + rng.randrange(3)) % len(RANGES)]
        rule = make_rule(rng, f"{model}-{index:04d}", model, fw_range, now, cites)
        path = root / PROFILES / model / f"{rule.rule_id}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rule_yaml(rule))
    overrides = 0
    for i, instance in enumerate(INSTANCES):
        items: list[Rule] = []
        for model in names[i : i + 4]:
            for fw_range in ("*", "1.2.*", "1.3.0"):
                rule = make_rule(rng, f"{instance}-{model}-{len(items)}", model, fw_range, now, cites)
                items.append(rule.model_copy(update={"instance_id": instance}))
        path = root / OVERRIDES / f"{instance}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(overrides_yaml(instance, items))
        overrides += len(items)
    return rules, overrides


def resolve_keys(models: int) -> list[tuple[str, str, str | None]]:
    """Every (model, version) pair, plus the instances' keys for the models that have overrides."""
    names = model_ids(models)
    keys: list[tuple[str, str, str | None]] = [(m, v, None) for m in names for v in VERSIONS]
    for i, instance in enumerate(INSTANCES):
        keys += [(m, v, instance) for m in names[i : i + 4] for v in ("1.2.3", "1.3.0", "2.0.1")]
    return keys


# --- talking to the daemon ------------------------------------------------------------------------------------


def settle(rpc: Rpc, ws: str) -> str:
    """Wait for the search index of the workspace to catch up (background work that would skew the next
    measurement); returns how long that took, or why it failed (the rules do not depend on it)."""
    t = time.perf_counter()
    try:
        rpc.call("index", {"workspace": ws})
    except RuntimeError as exc:
        return f"index failed: {str(exc)[:120]}"
    return ms(time.perf_counter() - t)


@contextmanager
def serve(home: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A daemon on an existing MEMORYD_HOME (common.daemon makes a fresh one each time; a restart needs the same)."""
    with open(home / "daemon.log", "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memoryd", "serve", "--log-level", "warning"],
            env=env_for(home),
            stdout=log,
            stderr=log,
        )
        try:
            yield proc
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def line(label: str, values_ms: list[float], target: str = "") -> None:
    print(
        f"  {label}: p50 {pct(values_ms, 0.5):.3f} · p90 {pct(values_ms, 0.9):.3f} · p99 {pct(values_ms, 0.99):.3f} "
        f"· max {max(values_ms):.3f} ms over {len(values_ms)} calls{target}"
    )


# --- 1. resolve ----------------------------------------------------------------------------------------------


def in_process_resolve(root: Path, keys: list[tuple[str, str, str | None]], warm_calls: int, rounds: int) -> None:
    from memoryd.rules.api import ResolveResult

    ruleset = RuleSet(root.resolve())
    t = time.perf_counter()
    ruleset.reload()
    print(f"  in-process RuleSet.reload() of every file: {ms(time.perf_counter() - t)}")
    cold: list[float] = []
    for n in range(rounds):
        if n:  # a changed file (new mtime) makes the next reload re-index and drop the cache
            some = next(p for p in (root / PROFILES).rglob("*.yaml"))
            os.utime(some, ns=(time.time_ns(), time.time_ns()))
            t = time.perf_counter()
            ruleset.reload()
            print(f"  in-process reload after one file changed: {ms(time.perf_counter() - t)}")
        for key in keys:
            t = time.perf_counter()
            ruleset.resolve(*key)
            cold.append((time.perf_counter() - t) * 1000)
    rng = random.Random(1)
    warm = []
    for _ in range(warm_calls):
        key = rng.choice(keys)
        t = time.perf_counter()
        ruleset.resolve(*key)
        warm.append((time.perf_counter() - t) * 1000)
    line("in-process RuleSet.resolve cold", cold, "  (target p50 ≤ 1 ms)")
    line("in-process RuleSet.resolve warm", warm, "  (target p50 ≤ 1 ms)")
    # What the daemon adds on top of RuleSet.resolve for every call, cached or not (RulesService.resolve).
    answers = [ruleset.resolve(*key) for key in keys]
    t = time.perf_counter()
    for _ in range(200):
        ruleset.errors()
    errors_ms = (time.perf_counter() - t) / 200 * 1000
    t = time.perf_counter()
    for (model, version, instance), answer in zip(keys, answers, strict=True):
        ResolveResult.model_validate(
            {
                "model_id": model,
                "fw_version": version,
                "instance_id": instance,
                "facts": answer.facts,
                "trace": answer.trace,
                "rules": answer.rules,
                "generation": ruleset.generation,
                "errors": [],
            }
        ).model_dump(mode="json", exclude_none=True)
    wrap_ms = (time.perf_counter() - t) / len(keys) * 1000
    matched = statistics.fmean(len(a.rules) for a in answers)
    facts = statistics.fmean(len(a.facts) for a in answers)
    beaten = statistics.fmean(len(e.beat) for a in answers for e in a.trace.values())
    print(
        f"  per answer: {matched:.0f} matching rules, {facts:.0f} facts, {beaten:.1f} beaten rules per fact (mean); "
        f"the daemon adds per call: RuleSet.errors() {errors_ms:.3f} ms (computed once per reload), "
        f"ResolveResult validate+dump {wrap_ms:.3f} ms"
    )


def daemon_resolve(
    sock: Path, ws: str, root: Path, keys: list[tuple[str, str, str | None]], warm_calls: int, rounds: int
) -> None:
    rpc = Rpc(str(sock))
    probe = {"workspace": ws, "model_id": keys[0][0], "fw_version": "9.9.9"}  # a key the measurement never uses
    settle(rpc, ws)  # the search index's start-up rescan is over
    for _ in range(200):
        rpc.call("ping")
    floor, empty = [], []
    for _ in range(1000):
        t = time.perf_counter()
        rpc.call("ping")
        floor.append((time.perf_counter() - t) * 1000)
    unknown = {"workspace": ws, "model_id": "no-such-model", "fw_version": "1.2.3"}
    for _ in range(1000):
        t = time.perf_counter()
        rpc.call("resolve", unknown)
        empty.append((time.perf_counter() - t) * 1000)
    cold: list[float] = []
    size = 0
    for n in range(rounds):
        if n:  # change one file; the watcher reloads the rule set (new generation, empty cache)
            generation = rpc.call("resolve", probe)["generation"]
            some = next(p for p in (root / PROFILES).rglob("*.yaml"))
            os.utime(some, ns=(time.time_ns(), time.time_ns()))
            t = time.perf_counter()
            while rpc.call("resolve", probe)["generation"] == generation:
                if time.perf_counter() - t > 30:
                    raise RuntimeError("the watcher did not reload the rules")
                time.sleep(0.01)
            print(f"  one file touched → watcher reloaded the rule set: {ms(time.perf_counter() - t)}")
            time.sleep(1.0)  # let the index catch up with the touched file before measuring
        for model, version, instance in keys:
            params = {"workspace": ws, "model_id": model, "fw_version": version, "instance_id": instance}
            t = time.perf_counter()
            rpc.call("resolve", params)
            cold.append((time.perf_counter() - t) * 1000)
    rng = random.Random(1)
    warm = []
    for _ in range(warm_calls):
        model, version, instance = rng.choice(keys)
        params = {"workspace": ws, "model_id": model, "fw_version": version, "instance_id": instance}
        t = time.perf_counter()
        answer = rpc.call("resolve", params)
        warm.append((time.perf_counter() - t) * 1000)
        size = max(size, len(orjson.dumps(answer)))
    rpc.close()
    line("RPC ping (floor of a round trip)", floor)
    line("RPC resolve of an unknown model (empty answer: the per-call cost without the payload)", empty)
    line("RPC resolve cold", cold, "  (target p50 ≤ 1 ms)")
    line("RPC resolve warm", warm, f"  (target p50 ≤ 1 ms; largest answer {size / 1024:.1f} KiB)")


def bench_resolve(rules: int, models: int, warm_calls: int, rounds: int) -> None:
    top = Path(tempfile.mkdtemp(prefix="mdbr", dir="/tmp"))
    root, home = top / "ws", top / "home"
    root.mkdir()
    home.mkdir()
    try:
        t = time.perf_counter()
        profiles, overrides = write_workspace(root, rules, models)
        keys = resolve_keys(models)
        print(
            f"\n## resolve: {profiles:,} profile rules over {models} model_ids ({profiles // models} each, ranges "
            f"{len(RANGES)} kinds from `*` to exact), {overrides} overrides in {len(INSTANCES)} instance files; "
            f"{len(keys)} distinct (model, version, instance) keys; written in {ms(time.perf_counter() - t)}"
        )
        in_process_resolve(root, keys, warm_calls, rounds)
        sock = home / "run" / "memoryd.sock"
        with serve(home):
            wait_socket(sock)
            rpc = Rpc(str(sock))
            t = time.perf_counter()
            ws = rpc.call("workspace.add", {"path": str(root)})["workspace_id"]
            rpc.call("resolve", {"workspace": ws, "model_id": model_ids(models)[0], "fw_version": "0.0.1"})
            print(
                f"  daemon running: workspace.add → first resolve answered: {ms(time.perf_counter() - t)}; "
                f"the search index caught up {settle(rpc, ws)} later"
            )
            rpc.close()
        t = time.perf_counter()
        with serve(home):
            wait_socket(sock)
            listening = time.perf_counter() - t
            rpc = Rpc(str(sock))
            rpc.call("resolve", {"workspace": ws, "model_id": model_ids(models)[0], "fw_version": "0.0.1"})
            first = time.perf_counter() - t
            loaded = rpc.call("status", {"workspace": ws})["workspaces"][0]["rules"]
            print(
                f"  daemon restart → socket listening {ms(listening)} → first resolve answered {ms(first)} "
                f"({loaded['profiles']:,} profile and {loaded['overrides']} override rules loaded, "
                f"{len(loaded['errors'])} errors)"
            )
            rpc.close()
            daemon_resolve(sock, ws, root, keys, warm_calls, rounds)
    finally:
        shutil.rmtree(top, ignore_errors=True)


# --- 2. compile.apply ----------------------------------------------------------------------------------------


def apply_response(rpc: Rpc, ws: str, rules: int, observations: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    names = model_ids(max(1, rules // 50))
    cites = []
    for n in range(observations):
        model = names[n % len(names)]
        result = rpc.call(
            "observe",
            {
                "workspace": ws,
                "kind": "test_result",
                "text": f"flash + uart loopback on {model} fw 1.2.{n % 7}: {rng.randrange(1000)} frames, 0 CRC errors",
                "source": "bench",
                "model_id": model,
                "fw_version": f"1.2.{n % 7}",
            },
        )
        cites.append(result["observation_id"])
    request_id = rpc.call("compile.prepare", {"workspace": ws})["request_id"]
    items: list[dict[str, Any]] = []
    for n in range(rules):
        model = names[n % len(names)]
        keys = rng.sample(FACTS, rng.randint(3, 8))
        items.append(
            {
                "rule_id": f"{model}-{n // len(names):04d}",
                "model_id": model,
                "fw_range": RANGES[n % len(RANGES)],
                "priority": rng.choice(PRIORITIES),
                "facts": {key: make(rng) for key, make in keys},
                "confidence": round(rng.uniform(0.75, 1.0), 2),
                "provenance": {"observation_ids": [cites[n % len(cites)], *rng.sample(cites, 2)]},
                "summary": f"{keys[0][0].split('.')[0]} facts for {model}",
            }
        )
    used = sorted({oid for item in items for oid in item["provenance"]["observation_ids"]})
    return {"request_id": request_id, "rules": items, "provenance_summary": {"observation_ids_used": used}}


def bench_apply(rules: int, observations: int, runs: int) -> None:
    print(f"\n## compile.apply: {rules} rules citing {observations} observations, fresh workspace each run")
    timings: dict[str, list[float]] = {"dry_run": [], "apply": [], "re-apply (no-op)": []}
    with daemon(log_level="warning") as (home, _env):
        rpc = Rpc(str(home / "run" / "memoryd.sock"))
        owner = Dirs.resolve(str(home)).owner_token.read_text().strip()
        for run in range(runs):
            root = Path(tempfile.mkdtemp(prefix="mdba", dir="/tmp"))
            try:
                ws = rpc.call("workspace.add", {"path": str(root)})["workspace_id"]
                settle(rpc, ws)
                response = apply_response(rpc, ws, rules, observations, seed=run)
                if run == 0:
                    print(f"  response {len(orjson.dumps(response)) / 1024:.0f} KiB")
                for label, dry in (("dry_run", True), ("apply", False), ("re-apply (no-op)", False)):
                    t = time.perf_counter()
                    result = rpc.call("compile.apply", {"workspace": ws, "response": response, "dry_run": dry})
                    timings[label].append(time.perf_counter() - t)
                    if label == "apply":
                        assert result["applied"] and len(result["writes"]) == rules, result
                        settle(rpc, ws)  # let the watcher's work finish before the re-apply
                    if label == "re-apply (no-op)":
                        assert result["already_applied"], result
                rpc.call("workspace.remove", {"workspace": ws, "owner_token": owner})
            finally:
                shutil.rmtree(root, ignore_errors=True)
        rpc.close()
    for label, values in timings.items():
        each = " / ".join(ms(v) for v in values)
        target = "  (target ≤ 2 s)" if label == "apply" else ""
        print(f"  {label}: median {ms(statistics.median(values))} (runs: {each}){target}")


# --- 3. observe ----------------------------------------------------------------------------------------------


def bench_observe(calls: int) -> None:
    print(f"\n## observe: one small observation per call, {calls} calls, one connection")
    root = Path(tempfile.mkdtemp(prefix="mdbo", dir="/tmp"))
    try:
        with daemon(log_level="warning") as (home, _env):
            rpc = Rpc(str(home / "run" / "memoryd.sock"))
            ws = rpc.call("workspace.add", {"path": str(root)})["workspace_id"]
            settle(rpc, ws)
            lat = []
            for n in range(calls):
                params = {
                    "workspace": ws,
                    "kind": "measurement",
                    "text": f"boot time {100 + n % 50} ms on bench-a",
                    "source": "bench",
                    "model_id": "nrf52840-dk-r001",
                    "fw_version": "1.2.3",
                }
                t = time.perf_counter()
                rpc.call("observe", params)
                lat.append((time.perf_counter() - t) * 1000)
            rpc.close()
        line("RPC observe (append + fsync)", lat)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rules", type=int, default=10_000, help="profile rules in the resolve workspace")
    parser.add_argument("--models", type=int, default=100, help="model_ids they are spread over")
    parser.add_argument("--warm", type=int, default=10_000, help="warm resolve calls")
    parser.add_argument("--rounds", type=int, default=3, help="cold passes over every key (a reload before each)")
    parser.add_argument("--apply-rules", type=int, default=500)
    parser.add_argument("--apply-observations", type=int, default=50)
    parser.add_argument("--apply-runs", type=int, default=3)
    parser.add_argument("--observes", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="small numbers for a smoke run")
    args = parser.parse_args()
    if args.quick:
        args.rules, args.models, args.warm, args.rounds = 1000, 10, 1000, 2
        args.apply_rules, args.apply_observations, args.apply_runs, args.observes = 100, 20, 1, 200
    print(f"# bench_rules · {conditions()}")
    bench_resolve(args.rules, args.models, args.warm, args.rounds)
    bench_apply(args.apply_rules, args.apply_observations, args.apply_runs)
    bench_observe(args.observes)


if __name__ == "__main__":
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    main()
