"""Progress bars on a terminal, drawn on stderr from a second connection polling status while the call runs:
`memoryctl index` (indexing, then the embedding backlog) and the verbs that write a long change (`archive`, `ttl`,
`restore`: the files of the change written so far)."""

from __future__ import annotations

import sys
import time

from memoryctl.rpc import ClientError, Connection, RemoteError

TYPE_CHECKING = False  # `import typing` costs ~3 ms of start-up
if TYPE_CHECKING:
    from typing import Any


def index_with_progress(conn: Connection, params: dict[str, Any]) -> Any:
    """Run the index call in a thread; meanwhile poll status on a second connection and draw a bar."""
    import threading

    path, timeout = conn.path, conn.timeout
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = conn.call("index", params)
        except BaseException as exc:  # re-raised in the caller's thread
            outcome["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    shown = False
    status_params = {k: v for k, v in params.items() if k in ("workspace", "scope", "owner_token")}
    try:
        with Connection(path, timeout) as watcher:
            while worker.is_alive():
                worker.join(0.2)
                if not worker.is_alive():
                    break
                for ws in watcher.call("status", status_params).get("workspaces", []):
                    progress = ws.get("indexing")
                    if progress and progress["total"]:
                        done, total = progress["done"], progress["total"]
                        filled = int(30 * done / total)
                        sys.stderr.write(
                            f"\rindexing {ws['workspace_id']} [{'#' * filled}{'.' * (30 - filled)}] "
                            f"{done}/{total} files"
                        )
                        sys.stderr.flush()
                        shown = True
    except (ClientError, RemoteError):
        worker.join()
    if shown:
        sys.stderr.write("\n")
    if "error" in outcome:
        raise outcome["error"]
    _embedding_progress(path, status_params, timeout)
    return outcome["result"]


def _embedding_progress(path: str, status_params: dict[str, Any], timeout: float) -> None:
    """Draw the embedding backlog's bar until it is empty (Ctrl-C stops watching, not embedding)."""
    shown = False
    try:
        with Connection(path, timeout) as watcher:
            while True:
                backlog = [
                    (ws["workspace_id"], v["embedded"], v["total"])
                    for ws in watcher.call("status", status_params).get("workspaces", [])
                    if (v := ws.get("vectors")) and not v.get("problem") and v["embedded"] < v["total"]
                ]
                if not backlog:
                    break
                ws_id, done, total = backlog[0]
                filled = int(30 * done / total)
                sys.stderr.write(
                    f"\rembedding {ws_id} [{'#' * filled}{'.' * (30 - filled)}] {done}/{total} passages "
                    "(Ctrl-C stops watching; the daemon goes on)"
                )
                sys.stderr.flush()
                shown = True
                time.sleep(0.5)
    except (ClientError, RemoteError, KeyboardInterrupt):
        pass
    if shown:
        sys.stderr.write("\n")


def change_with_progress(conn: Connection, method: str, params: dict[str, Any]) -> Any:
    """Run a changing call (lifecycle.archive, lifecycle.ttl, restore) in a thread; meanwhile poll status on a
    second connection and draw the bar of the change being written (status: ``rules.change``)."""
    import threading

    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = conn.call(method, params)
        except BaseException as exc:  # re-raised in the caller's thread
            outcome["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    shown = False
    try:
        with Connection(conn.path, conn.timeout) as watcher:
            while worker.is_alive():
                worker.join(0.2)
                if not worker.is_alive():
                    break
                for ws in watcher.call("status", {"workspace": params["workspace"]}).get("workspaces", []):
                    change = (ws.get("rules") or {}).get("change")
                    if change and change["total"]:
                        done, total = change["done"], change["total"]
                        filled = int(30 * done / total)
                        sys.stderr.write(f"\r{change['op']} [{'#' * filled}{'.' * (30 - filled)}] {done}/{total} files")
                        sys.stderr.flush()
                        shown = True
    except (ClientError, RemoteError):
        worker.join()
    if shown:
        sys.stderr.write("\n")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]
