"""hypothesis: any sequence of JSON values, cut into arbitrary chunks, arrives as the same values in order."""

from __future__ import annotations

import socket
from typing import Any

import anyio
import anyio.abc
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memoryd.transport import Connection, serve_connection

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=50),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)


async def roundtrip(values: list[Any], cuts: list[int]) -> list[Any]:
    payload = b"".join(orjson.dumps({"v": v}) + b"\n" for v in values)
    received: list[Any] = []

    async def handle(line: bytes, uid: int | None, conn_id: int) -> bytes | None:
        received.append(orjson.loads(line)["v"])
        return b"ok\n"

    a, b = socket.socketpair(socket.AF_UNIX)
    server_stream = await anyio.abc.SocketStream.from_socket(a)
    client = await anyio.abc.SocketStream.from_socket(b)
    draining = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(
            lambda: serve_connection(
                server_stream,
                Connection(1),
                handle,
                max_line_bytes=1 << 20,
                idle_timeout_s=30,
                draining=draining,
            )
        )
        position = 0
        for cut in sorted(set(cuts)):
            if position < cut < len(payload):
                await client.send(payload[position:cut])
                position = cut
        await client.send(payload[position:])
        acks = b""
        while acks.count(b"\n") < len(values):
            acks += await client.receive()
        await client.aclose()
    return received


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(json_values, min_size=1, max_size=8), st.lists(st.integers(1, 400), max_size=10))
def test_framing_roundtrip(values: list[Any], cuts: list[int]) -> None:
    assert anyio.run(roundtrip, values, cuts) == values
