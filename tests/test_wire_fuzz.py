"""Arbitrary JSON at a real daemon: the params of every method, arbitrary values, batches. Every request with an id
is answered with a reply carrying that id, and the daemon still answers ping afterwards."""

from __future__ import annotations

import itertools
import json
import shutil
import socket
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memoryd.app import build_dispatcher
from tests.conftest import Daemon, daemon_env, short_tmp

METHODS = build_dispatcher().methods
_ids = itertools.count(1)

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(codec="utf-8"), max_size=40)
    | st.sampled_from(["串口超时", "memory/2026-01-01.md", "../../etc/passwd", "*", "1.2.3", ">=1.0 <2.0", ""])
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=10,
)


@st.composite
def requests(draw: st.DrawFn, workspace: str, scratch: str) -> dict[str, Any]:
    name = draw(st.sampled_from(sorted(METHODS)) | st.text(max_size=12))
    fields = list(getattr(METHODS[name].params, "model_fields", {})) if name in METHODS else []
    if name == "workspace.add":  # never a real directory (a fuzzed "/" would register the whole disk)
        params: Any = {"path": scratch + "/" + draw(st.text(max_size=20)), "name": draw(values)}
    elif len(fields) > 0 and draw(st.booleans()):
        chosen = draw(st.lists(st.sampled_from(fields), unique=True))
        params = {f: draw(values) for f in chosen}
        if "workspace" in fields and draw(st.booleans()):
            params["workspace"] = workspace
    else:
        params = draw(values)
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": name, "id": next(_ids)}
    if draw(st.booleans()) or params is not None:
        message["params"] = params
    return message


def read_line(sock: socket.socket, buffer: bytearray) -> Any:
    while b"\n" not in buffer:
        chunk = sock.recv(1 << 16)
        assert chunk, "daemon closed the connection"
        buffer += chunk
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return json.loads(line)


def test_arbitrary_json_is_always_answered_and_the_daemon_lives() -> None:
    home = short_tmp()
    project = short_tmp("ws")
    d = Daemon(home, daemon_env(home)).start()
    try:
        workspace = d.call("workspace.add", {"path": str(project)})["workspace_id"]
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(60)
        sock.connect(str(d.socket))
        buffer = bytearray()
        one = requests(workspace, str(home / "no-such-dir"))

        @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
        @given(
            st.lists(one, min_size=1, max_size=5),
            st.booleans(),
            st.lists(values.filter(lambda v: not isinstance(v, dict)), max_size=2),
        )
        def exchange(batch: list[dict[str, Any]], as_batch: bool, junk: list[Any]) -> None:
            if as_batch:
                members: list[Any] = [*batch, *junk]
                sock.sendall(json.dumps(members, ensure_ascii=False).encode() + b"\n")
                reply = read_line(sock, buffer)
                assert isinstance(reply, list)
                assert sorted(r["id"] for r in reply if r["id"] is not None) == sorted(m["id"] for m in batch)
                assert sum(r["id"] is None for r in reply) == len(junk)
                assert all(("result" in r) != ("error" in r) for r in reply)
                assert not [r for r in reply if r.get("error", {}).get("data", {}).get("name") == "INTERNAL_ERROR"]
            else:
                for message in batch:
                    sock.sendall(json.dumps(message, ensure_ascii=False).encode() + b"\n")
                    reply = read_line(sock, buffer)
                    assert reply["id"] == message["id"]
                    assert ("result" in reply) != ("error" in reply)
                    assert reply.get("error", {}).get("data", {}).get("name") != "INTERNAL_ERROR", reply

        exchange()
        sock.close()
        assert d.proc is not None and d.proc.poll() is None
        assert d.call("ping")["pong"]
    finally:
        d.stop()
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(project, ignore_errors=True)
