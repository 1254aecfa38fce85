"""Unique, time-sortable ids: a prefix and a ULID (48-bit milliseconds, 80 random bits, Crockford base32).

Monotonic within the process: two ids made in the same millisecond still sort in creation order.
"""

from __future__ import annotations

import secrets
import threading
import time
from datetime import UTC, datetime

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_lock = threading.Lock()
_last = (0, 0)


def _encode(value: int, length: int) -> str:
    out = []
    for _ in range(length):
        value, digit = divmod(value, 32)
        out.append(_ALPHABET[digit])
    return "".join(reversed(out))


def ulid(now: float | None = None) -> str:
    global _last
    ms = int((time.time() if now is None else now) * 1000)
    with _lock:
        last_ms, last_rand = _last
        if ms <= last_ms:  # same millisecond (or the clock stepped back): keep order by counting up
            ms, rand = last_ms, last_rand + 1
        else:
            rand = secrets.randbits(80)
        _last = (ms, rand)
    return _encode(ms, 10) + _encode(rand & ((1 << 80) - 1), 16)


def new_id(prefix: str) -> str:
    return f"{prefix}_{ulid()}"


def id_time(identifier: str) -> datetime:
    """The UTC time encoded in an id made by ``new_id``."""
    body = identifier.rsplit("_", 1)[-1][:10]
    ms = 0
    for char in body:
        ms = ms * 32 + _ALPHABET.index(char)
    return datetime.fromtimestamp(ms / 1000, UTC)


def iso(moment: datetime) -> str:
    return moment.astimezone().isoformat(timespec="milliseconds")
