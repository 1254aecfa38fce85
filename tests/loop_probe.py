"""Run ``python -m memoryd`` with an audit hook that records file-system calls made on the main thread (the
event loop's) once the daemon is serving, for paths under ``MEMORYD_PROBE_PREFIXES`` (os.pathsep-separated),
one ``event path`` per line to ``MEMORYD_PROBE_OUT``. Used by tests that check blocking work stays off the loop.
"""

from __future__ import annotations

import os
import runpy
import sys
import threading
from typing import Any

_EVENTS = {"open", "os.mkdir", "os.rename", "os.remove", "os.scandir", "os.listdir", "os.chmod"}
_PREFIXES = tuple(p for p in os.environ["MEMORYD_PROBE_PREFIXES"].split(os.pathsep) if p)
_OUT = open(os.environ["MEMORYD_PROBE_OUT"], "a", buffering=1, encoding="utf-8")  # noqa: SIM115
_MAIN = threading.main_thread()


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event not in _EVENTS or threading.current_thread() is not _MAIN or not args:
        return
    path = args[0]
    if isinstance(path, str | bytes | os.PathLike):
        text = os.fsdecode(path)
        if text.startswith(_PREFIXES):
            _OUT.write(f"{event} {text}\n")


sys.addaudithook(_hook)
sys.argv = ["memoryd", *sys.argv[1:]]
runpy.run_module("memoryd", run_name="__main__", alter_sys=True)
