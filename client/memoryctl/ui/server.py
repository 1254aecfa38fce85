"""Start the review page: bind 127.0.0.1 on a free port (or ``--port``), print the URL with its one-time token
(the first line on stdout — tests and scripts read it), open the browser unless ``--no-browser``, serve until
interrupted. The socket is listening before the URL is printed, so the URL works the moment it appears."""

from __future__ import annotations

import socket
import sys
import webbrowser

import uvicorn

from memoryctl.ui.app import build
from memoryctl.ui.daemon import Daemon, DaemonError, bind

__all__ = ["DaemonError", "run"]
from memoryctl.ui.guard import Guard, Session


def run(
    socket_path: str,
    workspace: str | None,
    timeout: float,
    *,
    port: int = 0,
    owner: bool = False,
    read_only: bool = False,
    browser: bool = True,
) -> int:
    binding = bind(Daemon(socket_path, timeout), workspace, owner=owner, read_only=read_only)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    port = listener.getsockname()[1]
    session = Session()
    app = Guard(build(binding), session, port)
    link = f"http://127.0.0.1:{port}/login?token={session.login_token}"
    what = "every workspace (owner, read-only)" if owner else ", ".join(binding.bound.values())
    sys.stdout.write(f"{link}\n")
    sys.stdout.write(
        f"memoryd review page for {what}{' (read-only)' if read_only and not owner else ''}: the link works once; "
        "Ctrl-C stops it.\n"
    )
    sys.stdout.flush()
    if browser:
        webbrowser.open(link)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", server_header=False)
    uvicorn.Server(config).run(sockets=[listener])
    return 0
