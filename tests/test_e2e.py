"""memoryd serve and memoryctl as subprocesses, real signals, and the single-instance / stale-socket cases."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from memoryd.transport import peer_uid, uid_allowed
from tests.conftest import Daemon, daemon_env, short_tmp, wait_for
from tests.test_semantic import FakeEmbeddings, add_workspace, embedded, endpoint
from tests.test_semantic import start as semantic_start

pytestmark = pytest.mark.e2e


def test_serve_memoryctl_sigterm_clean_exit(daemon: Daemon) -> None:
    project = short_tmp("proj")
    out = daemon.memoryctl("--json", "init", cwd=project)
    assert out.returncode == 0, out.stderr
    envelope = json.loads(out.stdout)
    assert envelope["ok"] is True and envelope["data"]["path"] == str(project)
    pong = daemon.memoryctl("ping")
    assert pong.returncode == 0 and pong.stdout.startswith("pong")
    assert daemon.stop(signal.SIGTERM) == 0
    assert not daemon.socket.exists()
    assert not (daemon.home / "run" / "memoryd.pid").exists()


def test_sigint_drains_too(daemon: Daemon) -> None:
    assert daemon.stop(signal.SIGINT) == 0
    assert not daemon.socket.exists()


def test_second_daemon_on_same_home_exits_3(daemon: Daemon) -> None:
    second = subprocess.run(
        [sys.executable, "-m", "memoryd", "serve"], env=daemon.env, capture_output=True, text=True, timeout=60
    )
    assert second.returncode == 3
    assert "already running" in second.stderr and str(daemon.proc.pid) in second.stderr  # type: ignore[union-attr]
    assert daemon.call("ping")["pong"] is True  # the first one is untouched


def test_other_daemon_answering_on_socket_path_exits_3(daemon: Daemon) -> None:
    other_home = short_tmp("home")
    env = daemon_env(other_home)
    env["MEMORYD_SOCKET"] = str(daemon.socket)
    second = subprocess.run(
        [sys.executable, "-m", "memoryd", "serve"], env=env, capture_output=True, text=True, timeout=60
    )
    assert second.returncode == 3 and "answering" in second.stderr
    assert daemon.call("ping")["pong"] is True


def test_stale_socket_is_replaced(daemon_factory, home: Path) -> None:  # type: ignore[no-untyped-def]
    sock_path = home / "run" / "memoryd.sock"
    sock_path.parent.mkdir(parents=True, mode=0o700)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(sock_path))
    stale.close()  # the file stays, nobody listens: what a killed daemon leaves behind
    assert sock_path.exists()
    d = daemon_factory()
    assert d.call("ping")["pong"] is True


def test_killed_daemon_leftovers_do_not_block_restart(daemon_factory) -> None:  # type: ignore[no-untyped-def]
    d = daemon_factory()
    d.proc.kill()
    d.proc.wait()
    assert d.socket.exists()  # SIGKILL leaves the socket and pid file
    d2 = daemon_factory()
    assert d2.call("ping")["pong"] is True


def test_path_that_is_not_a_socket_is_never_deleted(daemon_factory, home: Path) -> None:  # type: ignore[no-untyped-def]
    sock_path = home / "run" / "memoryd.sock"
    sock_path.parent.mkdir(parents=True, mode=0o700)
    sock_path.write_text("precious")
    d = daemon_factory(False)
    d.start(wait=False)
    assert d.proc.wait(60) == 3
    assert sock_path.read_text() == "precious"
    assert "not a socket" in d.log.read_text()


def test_systemd_socket_activation(home: Path) -> None:
    sock_path = home / "activated.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(sock_path))
    listener.listen(16)
    env = daemon_env(home)
    env["MEMORYD_SOCKET"] = str(sock_path)
    code = (
        "import os, sys\n"
        f"fd = {listener.fileno()}\n"
        "os.dup2(fd, 3)\n"
        "os.environ['LISTEN_PID'] = str(os.getpid())\n"
        "os.environ['LISTEN_FDS'] = '1'\n"
        "sys.argv = ['memoryd', 'serve']\n"
        "from memoryd.cli import main\n"
        "sys.exit(main())\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env=env, pass_fds=(listener.fileno(),), stderr=subprocess.PIPE
    )
    listener.close()
    try:
        d = Daemon(home, env)
        d.proc = proc
        d.socket = sock_path
        d.wait_ready()
        assert d.call("status")["socket"] == str(sock_path)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        _, err = proc.communicate()
        assert b'"activated":true' in err
        assert sock_path.exists()  # systemd owns the socket file; the daemon leaves it alone
    finally:
        if proc.poll() is None:
            proc.kill()


def test_memoryctl_without_daemon_explains_and_autostarts(home: Path) -> None:
    env = daemon_env(home)
    run = [sys.executable, "-m", "memoryctl"]
    down = subprocess.run([*run, "ping"], env=env, capture_output=True, text=True, timeout=60)
    assert down.returncode == 3
    assert "memoryd serve" in down.stderr and "--autostart" in down.stderr
    as_json = subprocess.run([*run, "--json", "ping"], env=env, capture_output=True, text=True, timeout=60)
    assert json.loads(as_json.stdout)["error"]["name"] == "DAEMON_UNAVAILABLE"
    started = subprocess.run([*run, "ping", "--autostart"], env=env, capture_output=True, text=True, timeout=60)
    assert started.returncode == 0, started.stderr
    pid = int((home / "run" / "memoryd.pid").read_text())
    try:
        assert subprocess.run([*run, "ping"], env=env, capture_output=True, timeout=60).returncode == 0
    finally:
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not (home / "run" / "memoryd.sock").exists(), timeout=20)


def test_peer_uid_of_own_connection() -> None:
    a, b = socket.socketpair(socket.AF_UNIX)
    with a, b:
        uid = peer_uid(a)
        if uid is None:
            pytest.skip("this platform cannot tell a peer's uid")
        assert uid == os.getuid()
        assert uid_allowed(uid)
    assert not uid_allowed(None)
    assert not uid_allowed(os.getuid() + 1)
    assert uid_allowed(1234, own_uid=1234)


@pytest.mark.skipif(
    os.getuid() != 0 or not sys.platform.startswith("linux"),
    reason="connecting as another uid needs root to switch users",
)
def test_other_uid_is_refused(daemon: Daemon) -> None:
    # Open the door on purpose (the daemon makes the dir 0700 and the socket 0600) so that only the
    # peer-credential check stands between another user and the daemon.
    os.chmod(daemon.home, 0o711)
    os.chmod(daemon.socket.parent, 0o711)
    os.chmod(daemon.socket, 0o666)
    code = (
        "import os, socket, sys\n"
        "os.setgid(65534); os.setuid(65534)\n"
        "s = socket.socket(socket.AF_UNIX); s.settimeout(10)\n"
        f"s.connect({str(daemon.socket)!r})\n"
        "try:\n"  # the daemon may close the connection before the request is even sent: that is a refusal too
        '    s.sendall(b\'{"jsonrpc":"2.0","method":"ping","id":1}\\n\')\n'
        "    data = s.recv(100)\n"
        "except (BrokenPipeError, ConnectionResetError):\n    data = b''\n"
        "sys.stdout.write(repr(data))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "b''"
    assert daemon.call("ping")["pong"] is True
    daemon.stop()
    assert "peer_refused" in daemon.log.read_text()


def test_second_sigint_forces_exit_while_draining(started: list[Daemon], home: Path) -> None:
    """The drain is held open for as long as the test wants: a hybrid search waits on a fake embedding endpoint
    that answers the query only once its gate opens (issue 19 §5: a rebuild of 4,000 files, which had to outlast
    two signals, made this depend on the machine's speed)."""
    fake = FakeEmbeddings(16)
    try:
        # both bounds far above the test's own: only the second SIGINT can end this drain
        d = semantic_start(started, home, **endpoint(fake), drain_timeout_s="120", embedding_timeout_s="120")
        _, ws = add_workspace(d, ["alpha bravo charlie"])
        embedded(d, ws, total=1)
        fake.gate.clear()

        def search() -> None:
            with contextlib.suppress(Exception):  # the daemon exits under it
                d.call("search", {"workspace": ws, "query": "alpha", "mode": "hybrid"}, timeout=120)

        worker = threading.Thread(target=search)
        worker.start()
        assert fake.held.wait(30)  # the search's query is at the endpoint: a request in flight
        assert d.proc is not None
        d.proc.send_signal(signal.SIGINT)  # drain: waits for the search (up to drain_timeout_s)
        wait_for(lambda: '"shutdown"' in d.log.read_text())  # logged when the daemon starts draining
        assert d.proc.poll() is None  # still draining
        d.proc.send_signal(signal.SIGINT)  # a second SIGINT: exit now
        assert d.proc.wait(20) == 130
        worker.join(30)
        assert not d.socket.exists()
        assert "forced_exit" in d.log.read_text()
    finally:
        fake.close()
