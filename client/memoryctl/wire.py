"""JSON for the socket and for `--json`, through the json package's own C accelerator (``_json``) without importing
the json package: `import json` pulls in re and enum (~5 ms of a ~20 ms `memoryctl search`).

``dumps`` and ``loads`` build exactly what ``json.dumps`` and ``json.loads`` build on CPython — they call the same
C encoder and scanner with the same settings (tests/test_client.py compares them on many values). Where ``_json``
is missing (another Python), the json package itself serves.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `import typing` costs ~3 ms of start-up
if TYPE_CHECKING:
    from typing import Any

try:
    from _json import encode_basestring, encode_basestring_ascii, make_encoder, make_scanner
except ImportError:  # pragma: no cover - CPython always has it
    make_encoder = None  # type: ignore[assignment,misc]

WHITESPACE = " \t\n\r"  # what JSON allows around a value (json.decoder.WHITESPACE)
_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


def _default(value: Any) -> Any:
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def dumps(value: Any, ensure_ascii: bool = True, separators: tuple[str, str] = (", ", ": ")) -> str:
    """``json.dumps(value, ensure_ascii=…, separators=…)``."""
    if make_encoder is None:  # pragma: no cover
        import json

        return json.dumps(value, ensure_ascii=ensure_ascii, separators=separators)
    encode = encode_basestring_ascii if ensure_ascii else encode_basestring
    if isinstance(value, str):
        return encode(value)
    item_separator, key_separator = separators
    encoder = make_encoder({}, _default, encode, None, key_separator, item_separator, False, False, True)
    return "".join(encoder(value, 0))


class _Context:
    """The settings the C scanner reads, as ``json.JSONDecoder()`` has them by default."""

    def __init__(self) -> None:
        self.strict = True
        self.object_hook = None
        self.object_pairs_hook = None
        self.parse_float = float
        self.parse_int = int
        self.parse_constant = _CONSTANTS.__getitem__
        self.memo: dict[str, str] = {}


_scan = None if make_encoder is None else make_scanner(_Context())  # type: ignore[arg-type]


def loads(data: str | bytes) -> Any:
    """``json.loads(data)`` for text, or bytes in UTF-8 (all the daemon sends); ValueError when it is not JSON."""
    if _scan is None:  # pragma: no cover
        import json

        return json.loads(data)
    text = data.decode("utf-8", "surrogatepass") if isinstance(data, bytes) else data
    start = len(text) - len(text.lstrip(WHITESPACE))
    try:
        value, end = _scan(text, start)
    except StopIteration as exc:
        raise ValueError(f"Expecting value: char {exc.value}") from None
    if text[end:].strip(WHITESPACE):
        raise ValueError(f"Extra data: char {end}")
    return value
