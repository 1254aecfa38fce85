"""JSON-RPC 2.0 envelope and dispatch, exactly as the specification says.

Single calls, batches (every member answered, each invalid member with its own error), notifications (never
answered, a batch of only notifications gets nothing back), -32700 with id null, -32600, -32601, -32602 with the
validation problems summarised, -32603 with nothing internal leaked. jsonrpcserver was measured and set aside
(docs/decisions/0001-own-jsonrpc-dispatcher.md).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import orjson
import structlog
from pydantic import BaseModel, RootModel, ValidationError

from memoryd import log as logsetup
from memoryd.errors import AppError, error_object
from memoryd.names import ErrorName
from memoryd.settings import ServerSettings

log = structlog.get_logger("memoryd.rpc")

S = TypeVar("S")  # what handlers are given as ``ctx.app``: the methods layer names it (methods/services.py)
P = TypeVar("P", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)
_NO_ID = object()
_ID_TYPES = (str, int, float)  # exact types: bool is not an id
_PARAMS_TYPES = (dict, list)
_MEMBERS = frozenset({"jsonrpc", "method", "params", "id"})


@dataclass(slots=True)
class Context(Generic[S]):
    """Per-request view of the connection: who is calling, and the shared application object (typed by the layer
    that registers the handlers: a Protocol there, which the composition root's object is checked against)."""

    app: S
    peer_uid: int | None = None
    conn_id: int = 0
    request_id: Any = None


@dataclass(frozen=True, slots=True)
class Method(Generic[S, P, R]):
    name: str
    params: type[P]
    result: type[R]
    handler: Callable[[Context[S], P], Awaitable[R]]
    summary: str
    writes: bool = False  # a write is refused while shutting down and with scope "all"


def _response(id_: Any, *, result: Any = None, error: dict[str, Any] | None = None) -> dict[str, Any]:
    if error is not None:
        return {"jsonrpc": "2.0", "error": error, "id": id_}
    return {"jsonrpc": "2.0", "result": result, "id": id_}


def _first_app_error(exc: BaseException) -> AppError | None:
    """The application error itself, or the first one inside a handler's task-group exception group."""
    if isinstance(exc, AppError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _first_app_error(inner)
            if found is not None:
                return found
    return None


def error_line(name: ErrorName, message: str | None = None, id_: Any = None, **data: Any) -> bytes:
    return orjson.dumps(_response(id_, error=error_object(name, message, **data))) + b"\n"


def _summarise(exc: ValidationError) -> list[dict[str, Any]]:
    # Locations, messages and types only: never the input, which may be memory text.
    return [
        {"loc": ".".join(str(p) for p in err["loc"]) or "(params)", "msg": err["msg"], "type": err["type"]}
        for err in exc.errors(include_url=False, include_input=False, include_context=False)
    ]


_ALWAYS_SENT = 64 * 1024  # a reply this small is never refused for the replies waiting: it fits a socket buffer


@dataclass
class Dispatcher(Generic[S]):
    methods: dict[str, Method[S, Any, Any]] = field(default_factory=dict)
    shutting_down: bool = False
    # max_batch_members, max_reply_bytes, max_unsent_reply_bytes (all connections' replies not yet taken)
    limits: ServerSettings = field(default_factory=ServerSettings)
    unsent: int = 0  # bytes of the replies handed to the transport and not yet sent (:meth:`sent`)

    def add(self, method: Method[S, Any, Any]) -> None:
        if method.name in self.methods:
            raise ValueError(f"method {method.name} registered twice")
        self.methods[method.name] = method

    def register(
        self, name: str, params: type[P], result: type[R], *, writes: bool = False
    ) -> Callable[[Callable[[Context[S], P], Awaitable[R]]], Callable[[Context[S], P], Awaitable[R]]]:
        def decorate(fn: Callable[[Context[S], P], Awaitable[R]]) -> Callable[[Context[S], P], Awaitable[R]]:
            summary = (fn.__doc__ or "").strip()
            self.add(Method(name, params, result, fn, summary, writes))
            return fn

        return decorate

    async def handle_line(self, line: bytes, ctx: Context[S]) -> bytes | None:
        """One framed line in, one framed line out (or None when nothing is to be sent).

        Each reply is serialised on its own, inside the error boundary, and measured: one over
        ``max_reply_bytes`` is replaced by REPLY_TOO_LARGE for its id. A batch reply is joined from its members'
        bytes, never built whole as objects first; once the members' replies reach ``max_reply_bytes`` the rest
        are answered REPLY_TOO_LARGE. A batch longer than ``max_batch_members`` is refused whole before any member
        runs.
        """
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            return error_line("PARSE_ERROR")
        if isinstance(message, list):
            if not message:
                return error_line("INVALID_REQUEST", "Invalid Request: empty batch")
            if len(message) > self.limits.max_batch_members:
                log.warning(
                    "batch_refused", members=len(message), limit=self.limits.max_batch_members, conn=ctx.conn_id
                )
                return error_line("BATCH_TOO_LARGE", members=len(message), limit=self.limits.max_batch_members)
            parts: list[bytes] = []
            size = 2
            for member in message:
                reply = await self._handle_one(member, ctx)
                if reply is None:
                    continue
                if size + len(reply) + 1 > self.limits.max_reply_bytes:
                    reply = self._too_large(reply, member, ctx, len(reply))
                elif not self._fits(size + len(reply)):
                    reply = self._busy(member, ctx, len(reply))
                size += len(reply) + 1
                parts.append(reply)
            del message
            return self._held(b"[" + b",".join(parts) + b"]\n") if parts else None
        reply = await self._handle_one(message, ctx)
        if reply is None:
            return None
        if len(reply) + 1 > self.limits.max_reply_bytes:
            reply = self._too_large(reply, message, ctx, len(reply))
        elif not self._fits(len(reply)):
            reply = self._busy(message, ctx, len(reply))
        return self._held(reply + b"\n")

    # Replies waiting for their clients (issue 19, 2.10): a client that never reads holds its reply in the
    # daemon until send_timeout_s; a hundred of them held 1.2 GB. Small replies always go (errors among them).
    def _fits(self, size: int) -> bool:
        return size <= _ALWAYS_SENT or self.unsent + size <= self.limits.max_unsent_reply_bytes

    def _held(self, reply: bytes) -> bytes:
        self.unsent += len(reply)
        return reply

    def sent(self, reply: bytes) -> None:
        """The transport is done with ``reply`` (from :meth:`handle_line`): sent, or its client gone."""
        self.unsent -= len(reply)

    def _busy(self, member: Any, ctx: Context[S], size: int) -> bytes:
        id_ = member.get("id") if isinstance(member, dict) else None
        log.warning("reply_refused_busy", bytes=size, unsent=self.unsent, request_id=id_, conn=ctx.conn_id)
        error = error_object(
            "MEMORY_BUSY",
            "Too many replies are waiting for their clients to read them",
            hint="Try again in a moment; clients that do not read their replies are disconnected.",
            reply_bytes=size,
            unsent_bytes=self.unsent,
            limit=self.limits.max_unsent_reply_bytes,
            setting="max_unsent_reply_bytes",
        )
        return orjson.dumps(_response(id_, error=error))

    def _too_large(self, reply: bytes, member: Any, ctx: Context[S], size: int) -> bytes:
        id_ = member.get("id") if isinstance(member, dict) else None
        log.warning("reply_too_large", bytes=size, limit=self.limits.max_reply_bytes, request_id=id_, conn=ctx.conn_id)
        return orjson.dumps(
            _response(id_, error=error_object("REPLY_TOO_LARGE", reply_bytes=size, limit=self.limits.max_reply_bytes))
        )

    async def _handle_one(self, message: Any, ctx: Context[S]) -> bytes | None:
        """One request in, its serialised reply out (None for a notification)."""
        if not isinstance(message, dict):
            return orjson.dumps(_response(None, error=error_object("INVALID_REQUEST")))
        id_ = message.get("id", _NO_ID)
        valid_id = id_ is _NO_ID or id_ is None or type(id_) in _ID_TYPES
        method_name = message.get("method")
        params = message.get("params", _NO_ID)
        if (
            message.get("jsonrpc") != "2.0"
            or type(method_name) is not str
            or not valid_id
            or (params is not _NO_ID and type(params) not in _PARAMS_TYPES)
            or not _MEMBERS.issuperset(message)
        ):
            bad_id = id_ if valid_id and id_ is not _NO_ID else None
            return orjson.dumps(_response(bad_id, error=error_object("INVALID_REQUEST")))
        notification = id_ is _NO_ID
        started = time.perf_counter_ns()
        result, error = await self._call(method_name, params, ctx, id_)
        reply: bytes | None = None
        if not notification:
            try:
                reply = orjson.dumps(_response(id_, result=result, error=error))
            except (TypeError, ValueError):  # orjson.JSONEncodeError is a TypeError
                # A result the wire cannot carry (an integer beyond 64 bits, a non-string key): a handler bug.
                log.exception("unserialisable_result", method=method_name, request_id=id_, conn=ctx.conn_id)
                error = error_object("INTERNAL_ERROR")
                reply = orjson.dumps(_response(id_, error=error))
        name = None if error is None else error["data"]["name"]
        logsetup.request(
            method_name if method_name in self.methods else "(unknown)",
            (time.perf_counter_ns() - started) // 1000 / 1000,  # ms with µs resolution, no round()
            name,
            None if notification else id_,
            ctx.conn_id,
        )
        return reply

    async def _call(self, name: str, params: Any, ctx: Context[S], id_: Any) -> tuple[Any, dict[str, Any] | None]:
        """Returns (result, None) or (None, error object)."""
        method = self.methods.get(name)
        if method is None:
            return None, error_object("METHOD_NOT_FOUND")
        if self.shutting_down:
            return None, AppError("MEMORY_SHUTTING_DOWN").to_error()
        if method.writes and isinstance(params, dict) and params.get("scope") == "all":
            return None, AppError("MEMORY_FORBIDDEN", f"{name} writes; scope 'all' is read-only").to_error()
        if params is _NO_ID:
            params = {}
        elif isinstance(params, list) and not issubclass(method.params, RootModel):
            names = list(method.params.model_fields)
            if len(params) > len(names):
                too_many = {"loc": "(params)", "msg": "too many positional params", "type": "too_long"}
                return None, error_object("INVALID_PARAMS", errors=[too_many])
            params = dict(zip(names, params, strict=False))
        try:
            model = method.params.model_validate(params)
        except ValidationError as exc:
            return None, error_object("INVALID_PARAMS", errors=_summarise(exc))
        ctx.request_id = None if id_ is _NO_ID else id_
        try:
            result = await method.handler(ctx, model)
            return result.model_dump(mode="json", exclude_none=True), None
        except Exception as exc:
            app_error = _first_app_error(exc)
            if app_error is not None:
                return None, app_error.to_error()
            log.exception("internal_error", method=name, request_id=ctx.request_id)
            return None, error_object("INTERNAL_ERROR")
