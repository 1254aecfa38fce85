"""One test per example in the JSON-RPC 2.0 specification's "Examples" section (jsonrpc.org/specification).

The dispatcher is the daemon's own (memoryd.rpc.Dispatcher), fed the exact request lines of the examples, with
the example methods (subtract, sum, update, notify_hello, get_data) registered on it.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from pydantic import BaseModel, RootModel

from memoryd.rpc import Context, Dispatcher

pytestmark = pytest.mark.anyio


class Subtract(BaseModel):
    minuend: int
    subtrahend: int


class Numbers(RootModel[list[int]]):
    pass


class Number(RootModel[int]):
    pass


class Anything(RootModel[Any]):
    pass


class NoParams(BaseModel):
    pass


def example_dispatcher() -> Dispatcher[None]:
    d: Dispatcher[None] = Dispatcher()

    @d.register("subtract", Subtract, Number)
    async def subtract(ctx: Context[None], p: Subtract) -> Number:
        return Number(p.minuend - p.subtrahend)

    @d.register("sum", Numbers, Number)
    async def sum_(ctx: Context[None], p: Numbers) -> Number:
        return Number(sum(p.root))

    @d.register("update", Numbers, Anything)
    async def update(ctx: Context[None], p: Numbers) -> Anything:
        return Anything(None)

    @d.register("notify_hello", Numbers, Anything)
    async def notify_hello(ctx: Context[None], p: Numbers) -> Anything:
        return Anything(None)

    @d.register("notify_sum", Numbers, Anything)
    async def notify_sum(ctx: Context[None], p: Numbers) -> Anything:
        return Anything(None)

    @d.register("get_data", NoParams, Anything)
    async def get_data(ctx: Context[None], p: NoParams) -> Anything:
        return Anything(["hello", 5])

    return d


async def call(line: str) -> Any:
    reply = await example_dispatcher().handle_line(line.encode(), Context(app=None))
    return None if reply is None else orjson.loads(reply)


def strip_data(reply: Any) -> Any:
    """The spec's examples show code and message; our errors also carry data (name, hint)."""
    if isinstance(reply, list):
        return [strip_data(r) for r in reply]
    if isinstance(reply, dict) and "error" in reply:
        assert reply["error"]["data"]["name"]
        return {**reply, "error": {"code": reply["error"]["code"]}}
    return reply


async def test_positional_parameters() -> None:
    assert await call('{"jsonrpc": "2.0", "method": "subtract", "params": [42, 23], "id": 1}') == {
        "jsonrpc": "2.0",
        "result": 19,
        "id": 1,
    }
    assert await call('{"jsonrpc": "2.0", "method": "subtract", "params": [23, 42], "id": 2}') == {
        "jsonrpc": "2.0",
        "result": -19,
        "id": 2,
    }


async def test_named_parameters() -> None:
    assert await call(
        '{"jsonrpc": "2.0", "method": "subtract", "params": {"subtrahend": 23, "minuend": 42}, "id": 3}'
    ) == {"jsonrpc": "2.0", "result": 19, "id": 3}
    assert await call(
        '{"jsonrpc": "2.0", "method": "subtract", "params": {"minuend": 42, "subtrahend": 23}, "id": 4}'
    ) == {"jsonrpc": "2.0", "result": 19, "id": 4}


async def test_notifications_get_no_reply() -> None:
    assert await call('{"jsonrpc": "2.0", "method": "update", "params": [1,2,3,4,5]}') is None
    assert await call('{"jsonrpc": "2.0", "method": "foobar"}') is None


async def test_non_existent_method() -> None:
    reply = await call('{"jsonrpc": "2.0", "method": "foobar", "id": "1"}')
    assert strip_data(reply) == {"jsonrpc": "2.0", "error": {"code": -32601}, "id": "1"}
    assert reply["error"]["message"] == "Method not found"


async def test_invalid_json() -> None:
    reply = await call('{"jsonrpc": "2.0", "method": "foobar, "params": "bar", "baz]')
    assert strip_data(reply) == {"jsonrpc": "2.0", "error": {"code": -32700}, "id": None}
    assert reply["error"]["message"] == "Parse error"


async def test_invalid_request_object() -> None:
    reply = await call('{"jsonrpc": "2.0", "method": 1, "params": "bar"}')
    assert strip_data(reply) == {"jsonrpc": "2.0", "error": {"code": -32600}, "id": None}


async def test_batch_invalid_json() -> None:
    reply = await call(
        '[{"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},{"jsonrpc": "2.0", "method"]'
    )
    assert strip_data(reply) == {"jsonrpc": "2.0", "error": {"code": -32700}, "id": None}


async def test_empty_array() -> None:
    reply = await call("[]")
    assert strip_data(reply) == {"jsonrpc": "2.0", "error": {"code": -32600}, "id": None}


async def test_invalid_batch_but_not_empty() -> None:
    assert strip_data(await call("[1]")) == [{"jsonrpc": "2.0", "error": {"code": -32600}, "id": None}]


async def test_invalid_batch() -> None:
    assert strip_data(await call("[1,2,3]")) == [
        {"jsonrpc": "2.0", "error": {"code": -32600}, "id": None},
        {"jsonrpc": "2.0", "error": {"code": -32600}, "id": None},
        {"jsonrpc": "2.0", "error": {"code": -32600}, "id": None},
    ]


async def test_mixed_batch() -> None:
    reply = await call("""[
        {"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},
        {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]},
        {"jsonrpc": "2.0", "method": "subtract", "params": [42,23], "id": "2"},
        {"foo": "boo"},
        {"jsonrpc": "2.0", "method": "foo.get", "params": {"name": "myself"}, "id": "5"},
        {"jsonrpc": "2.0", "method": "get_data", "id": "9"}
    ]""")
    assert strip_data(reply) == [
        {"jsonrpc": "2.0", "result": 7, "id": "1"},
        {"jsonrpc": "2.0", "result": 19, "id": "2"},
        {"jsonrpc": "2.0", "error": {"code": -32600}, "id": None},
        {"jsonrpc": "2.0", "error": {"code": -32601}, "id": "5"},
        {"jsonrpc": "2.0", "result": ["hello", 5], "id": "9"},
    ]


async def test_batch_of_only_notifications() -> None:
    assert (
        await call("""[
        {"jsonrpc": "2.0", "method": "notify_sum", "params": [1,2,4]},
        {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]}
    ]""")
        is None
    )


async def test_invalid_params_are_summarised_without_input() -> None:
    reply = await call('{"jsonrpc": "2.0", "method": "subtract", "params": {"minuend": "secret text"}, "id": 7}')
    assert reply["error"]["code"] == -32602
    problems = reply["error"]["data"]["errors"]
    assert {p["loc"] for p in problems} == {"minuend", "subtrahend"}
    assert "secret text" not in orjson.dumps(reply).decode()


async def test_internal_errors_leak_nothing() -> None:
    d = example_dispatcher()

    @d.register("boom", NoParams, Anything)
    async def boom(ctx: Context[None], p: NoParams) -> Anything:
        raise RuntimeError("/home/someone/secret path and memory text")

    reply = orjson.loads(await d.handle_line(b'{"jsonrpc":"2.0","method":"boom","id":1}', Context(app=None)) or b"")
    assert reply["error"]["code"] == -32603
    assert "secret" not in orjson.dumps(reply).decode()
    assert "Traceback" not in orjson.dumps(reply).decode()


@pytest.mark.parametrize("bad_id", ["true", "{}", "[1]"])
async def test_request_with_an_invalid_id_is_invalid(bad_id: str) -> None:
    reply = await call(f'{{"jsonrpc": "2.0", "method": "get_data", "id": {bad_id}}}')
    assert strip_data(reply) == {"jsonrpc": "2.0", "error": {"code": -32600}, "id": None}


async def test_wrong_version_and_extra_members_are_invalid() -> None:
    for line in (
        '{"jsonrpc": "1.0", "method": "get_data", "id": 1}',
        '{"jsonrpc": "2.0", "method": "get_data", "id": 1, "extra": true}',
        '{"jsonrpc": "2.0", "method": "get_data", "params": 5, "id": 1}',
    ):
        assert strip_data(await call(line)) == {"jsonrpc": "2.0", "error": {"code": -32600}, "id": 1}


async def test_a_result_the_wire_cannot_carry_is_an_internal_error_for_its_id() -> None:
    d = example_dispatcher()

    @d.register("huge", NoParams, Anything)
    async def huge(ctx: Context[None], p: NoParams) -> Anything:
        return Anything({"x": 2**64 + 1})  # valid JSON, beyond what orjson serialises

    line = b'[{"jsonrpc":"2.0","method":"huge","id":1},{"jsonrpc":"2.0","method":"get_data","id":2}]'
    replies = orjson.loads(await d.handle_line(line, Context(app=None)) or b"")
    assert replies[0]["id"] == 1 and replies[0]["error"]["data"]["name"] == "INTERNAL_ERROR"
    assert replies[1] == {"jsonrpc": "2.0", "result": ["hello", 5], "id": 2}
