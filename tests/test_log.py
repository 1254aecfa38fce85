"""Logging: JSON lines when nobody watches, a console renderer on a TTY; request lines batched, warnings at once."""

from __future__ import annotations

import io
import json
import sys

import pytest
import structlog

from memoryd import log as logsetup


class _Stderr(io.TextIOWrapper):
    """A text stderr over a BytesIO (``raw``), a terminal or not."""

    def __init__(self, tty: bool) -> None:
        self.raw_bytes = io.BytesIO()
        super().__init__(self.raw_bytes, encoding="utf-8", write_through=True)
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


def _stderr(tty: bool) -> _Stderr:
    return _Stderr(tty)


@pytest.fixture(autouse=True)
def _restore() -> object:
    yield
    structlog.reset_defaults()


def test_json_lines_off_a_tty_with_batched_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = _stderr(tty=False)
    monkeypatch.setattr(sys, "stderr", stream)
    logsetup.configure("info")
    logsetup.request("ping", 0.01, None, 1, 7)
    raw = stream.raw_bytes
    assert raw.getvalue() == b""  # request lines wait for the next flush...
    structlog.get_logger("t").warning("disk_low", free_mb=3)  # ...and go out with the first warning
    lines = [json.loads(line) for line in raw.getvalue().splitlines()]
    assert [line["event"] for line in lines] == ["request", "disk_low"]
    assert lines[0]["method"] == "ping" and lines[0]["conn"] == 7 and lines[1]["level"] == "warning"
    logsetup.request("ping", 0.01, None, 2, 7)
    logsetup.flush()
    assert raw.getvalue().count(b"\n") == 3


def test_console_renderer_on_a_tty(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = _stderr(tty=True)
    monkeypatch.setattr(sys, "stderr", stream)
    logsetup.configure("info")
    structlog.get_logger("t").info("ready", socket="/tmp/x.sock")
    text = stream.raw_bytes.getvalue().decode()
    assert "ready" in text and "socket=/tmp/x.sock" in text
    with pytest.raises(ValueError):
        json.loads(text.splitlines()[0])


def test_level_filters_request_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = _stderr(tty=False)
    monkeypatch.setattr(sys, "stderr", stream)
    logsetup.configure("warning")
    logsetup.request("ping", 0.01, None, 1, 1)
    logsetup.flush()
    assert stream.raw_bytes.getvalue() == b""


def test_lines_from_eight_threads_arrive_exactly_once_while_the_loop_flushes() -> None:
    """Worker threads log while the loop's timer flushes: no line lost, none written twice."""
    import threading

    raw = io.BytesIO()
    logger = logsetup.BufferedBytesLogger(raw, max_delay_s=3600.0, max_bytes=512)  # writers flush too
    per_thread, threads_n = 5000, 8
    done = threading.Event()

    def writer(t: int) -> None:
        for n in range(per_thread):
            logger.info(b'{"t":%d,"n":%d}' % (t, n))

    def flusher() -> None:
        while not done.is_set():
            logger.flush()

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: the race shows within a run
    try:
        flushing = threading.Thread(target=flusher)
        flushing.start()
        writers = [threading.Thread(target=writer, args=(t,)) for t in range(threads_n)]
        for w in writers:
            w.start()
        for w in writers:
            w.join()
        done.set()
        flushing.join()
    finally:
        sys.setswitchinterval(old)
    logger.flush()
    lines = raw.getvalue().splitlines()
    seen = {(m["t"], m["n"]) for m in map(json.loads, lines)}
    assert len(lines) == threads_n * per_thread
    assert seen == {(t, n) for t in range(threads_n) for n in range(per_thread)}


def test_memoryd_serve_prints_human_lines_on_a_terminal_and_json_otherwise() -> None:
    """What `make run` shows (issue 19 §3.11): `memoryd serve` with its stderr on a terminal prints readable lines,
    with stderr on a pipe or a file (a service manager, a log file) JSON lines."""
    import os
    import pty
    import select
    import subprocess

    from tests.conftest import Daemon, daemon_env, short_tmp

    home = short_tmp()
    daemon = Daemon(home, daemon_env(home))
    master, slave = pty.openpty()
    daemon.proc = subprocess.Popen(
        [sys.executable, "-m", "memoryd", "serve"],
        env=daemon.env,
        stdout=subprocess.DEVNULL,
        stderr=slave,
        stdin=subprocess.DEVNULL,
    )
    os.close(slave)
    daemon._log_handle = open(os.devnull, "ab")  # noqa: SIM115 - closed by stop()
    try:
        daemon.wait_ready()
        daemon.call("ping")
    finally:
        assert daemon.stop() == 0
    out = b""
    while select.select([master], [], [], 5.0)[0]:  # the daemon has exited: read what it left until EOF
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the terminal's other end is closed
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    lines = [line for line in out.decode().splitlines() if line.strip()]
    assert any(" ready " in line and "socket=" in line for line in lines), lines
    assert any(" request " in line and "method=ping" in line for line in lines), lines
    for line in lines:
        assert not line.lstrip().startswith("{"), line

    piped = Daemon(short_tmp(), {})
    piped.env = daemon_env(piped.home)
    piped.start()
    piped.call("ping")
    assert piped.stop() == 0
    events = [json.loads(line) for line in piped.log.read_text().splitlines() if line.strip()]
    assert {"ready", "request"} <= {e["event"] for e in events}
