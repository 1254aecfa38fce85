"""What the review page's tests share: a real `memoryctl ui` started as a subprocess against a real daemon (its
first stdout line, the login URL, is the readiness signal: the socket listens before it is printed), a workspace
seeded through the daemon, headless Debian Chromium driven by Selenium through the system chromedriver, and plain
HTTP requests for the checks a browser will not make (a forged Host or Origin)."""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.conftest import ROOT, Daemon
from tests.test_rules import observe, prepare, response, rule

INSTALL = "apt-get install -y chromium chromium-driver"
SCREENSHOTS = ROOT / "docs" / "tutorial" / "img"


def chromium() -> tuple[str, str] | None:
    """(browser, driver) when Debian's chromium and chromedriver are installed."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


@dataclass
class Server:
    proc: subprocess.Popen[str]
    url: str  # the login URL, one-time token included
    port: int

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@contextlib.contextmanager
def ui_server(daemon: Daemon, cwd: Path, *extra: str) -> Iterator[Server]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "memoryctl", "ui", "--no-browser", *extra],
        cwd=cwd,
        env=daemon.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline().strip()  # blocks until the URL is printed (or the process ends)
    if not first.startswith("http://127.0.0.1:"):
        proc.kill()
        _, err = proc.communicate(timeout=10)
        raise AssertionError(f"memoryctl ui did not start: {first!r} {err}")
    server = Server(proc, first, int(urlsplit(first).port or 0))
    try:
        yield server
    finally:
        server.stop()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def request(
    server: Server, method: str, path: str, headers: dict[str, str] | None = None, body: str | None = None
) -> tuple[int, dict[str, str], str]:
    """One raw HTTP request (Host defaults to the server's own)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        sent = {"Host": f"127.0.0.1:{server.port}", **(headers or {})}
        conn.putrequest(method, path, skip_host=True)
        for name, value in sent.items():
            conn.putheader(name, value)
        data = body.encode() if body is not None else None
        if data is not None:
            conn.putheader("Content-Type", "application/x-www-form-urlencoded")
            conn.putheader("Content-Length", str(len(data)))
        conn.endheaders(data)
        answer = conn.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read().decode("utf-8", "replace")
    finally:
        conn.close()


def log_in(server: Server) -> str:
    """Spend the login token over plain HTTP; the session cookie's value."""
    path = server.url.removeprefix(server.base)
    status, headers, _ = request(server, "GET", path)
    assert status == 303, status
    cookie = headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    return cookie.split(";", 1)[0]


def seed(daemon: Daemon, root: Path, ws: str) -> dict[str, Any]:
    """A workspace worth reviewing: two entries (one Chinese), two profile rules and one candidate with evidence."""
    entries = [
        daemon.call(
            "remember",
            {
                "workspace": ws,
                "type": "decision",
                "text": "串口超时 ERR_UART_TIMEOUT_0x3F: raise the timeout to 500 ms",
            },
        ),
        daemon.call("remember", {"workspace": ws, "type": "note", "text": "The bench PSU browns out at 2.9 V"}),
    ]
    oid = observe(daemon, ws, run_id="run-bench-1")
    request_id = prepare(daemon, ws)["request_id"]
    rules = [
        rule(oid),
        rule(oid, rule_id="uart-default", fw_range="*", priority=0, facts={"transport.uart.baud": 115200}),
    ]
    candidate = rule(
        oid,
        rule_id="reset-hangs",
        fw_range="*",
        facts={"known_issues.reset_hangs": True},
        confidence=0.4,
        summary="reset hangs after a brown-out (复位卡死)",
    )
    applied = daemon.call(
        "compile.apply", {"workspace": ws, "response": response(request_id, rules=rules, candidates=[candidate])}
    )
    return {"entries": entries, "observation": oid, "apply": applied}


def browser(driver_path: str, binary: str) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        "--lang=en-US",
        "--no-first-run",
    ):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(executable_path=driver_path), options=options)


def screenshot(driver: Any, name: str) -> None:
    """Write docs/tutorial/img/<name>.png when MEMORYD_UI_SCREENSHOTS is set (the tutorial's pictures come from
    the tests, so they show what the page really does)."""
    if os.environ.get("MEMORYD_UI_SCREENSHOTS"):
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(SCREENSHOTS / f"{name}.png"))
