"""What every verb of memoryctl shares: the parsed arguments, the global options, input read with a cap, the
workspace a command runs in, output (text or the JSON envelope), error emission and exit codes, the connection.

Standard library only, and light: argparse is imported only when a parser is built (`memoryctl search` with a plain
command line never builds one — see quick.py); JSON goes through memoryctl.wire, not the json package.
"""

from __future__ import annotations

import os
import sys

from memoryctl.rpc import Connection, connect, environ_timeout, owner_token, parse_timeout

TYPE_CHECKING = False  # `import typing` costs ~3 ms of start-up
if TYPE_CHECKING:
    import argparse
    from typing import Any

EXIT_OK, EXIT_APP, EXIT_USAGE = 0, 1, 2  # and per error name (EXIT_CODES): 3 unavailable, 4 forbidden, 5 protocol
EXIT_INTERRUPTED = 130

# The daemon's error names that get an exit code other than 1; a test checks this against memoryd.errors.
EXIT_CODES = {
    "PARSE_ERROR": 5,
    "INVALID_REQUEST": 5,
    "REQUEST_TOO_LARGE": 5,
    "METHOD_NOT_FOUND": 5,
    "INVALID_PARAMS": 2,
    "MEMORY_PATH_TRAVERSAL": 4,
    "MEMORY_FORBIDDEN": 4,
    "MEMORY_SHUTTING_DOWN": 3,
    "MEMORY_BUSY": 3,
    "BATCH_TOO_LARGE": 5,
}


class Args:
    """The parsed command line: argparse fills it (``parse_args(namespace=Args())``), or the quick parser does.
    Attributes are the options' dests; one never set raises AttributeError, as on argparse's Namespace."""

    def __init__(self, **values: Any) -> None:
        self.__dict__.update(values)

    def __getattr__(self, name: str) -> Any:  # only for names never set: lets mypy see the dests as Any
        raise AttributeError(name)

    def __repr__(self) -> str:
        return f"Args({', '.join(f'{k}={v!r}' for k, v in sorted(vars(self).items()))})"


class Usage(Exception):
    def __init__(self, message: str, hint: str = "See memoryctl --help.") -> None:
        super().__init__(message)
        self.hint = hint


class PastEnd(Exception):
    """get asked for lines after the file's last one."""


# --- input -----------------------------------------------------------------------------------------------------

# What one request can carry: the daemon's default max_line_bytes. Text read from a file or standard input is
# read up to this and refused beyond it (`compile apply --in /dev/zero` had grown to 8.8 GB).
MAX_INPUT_BYTES = 8 * 1024 * 1024


def read_capped(source: str, what: str, hint: str = "Give a smaller input; nothing was sent.") -> str:
    """UTF-8 text from the file ``source`` (``-``: standard input), at most MAX_INPUT_BYTES."""
    try:
        if source == "-":
            data = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
        else:
            with open(source, "rb") as f:
                data = f.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise Usage(f"cannot read {what}: {exc.strerror or exc}", hint) from None
    if len(data) > MAX_INPUT_BYTES:
        raise Usage(f"{what} is larger than {MAX_INPUT_BYTES // (1024 * 1024)} MiB", hint)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Usage(f"{what} is not UTF-8 text (byte {exc.start})", "Give UTF-8 text; nothing was sent.") from None


# --- the workspace a command runs in ------------------------------------------------------------------------------

# What names the workspace when --workspace does not, in this order (EMBEDDED_MEMORY_ROOT: seed 000's store root).
WORKSPACE_ENV = ("MEMORYD_WORKSPACE", "EMBEDDED_MEMORY_ROOT")


def workspace_given(args: Args) -> str | None:
    """The workspace named by --workspace, else by MEMORYD_WORKSPACE, else by EMBEDDED_MEMORY_ROOT; None when
    nothing names one (the current directory decides)."""
    if args.workspace:
        return str(args.workspace)
    return next((value for name in WORKSPACE_ENV if (value := os.environ.get(name, "").strip())), None)


def workspace_of(args: Args) -> str:
    """The workspace id as given, a given path made absolute (against the cwd), or the current directory."""
    ref = workspace_given(args)
    if ref is None:
        return os.getcwd()
    return ref if ref.startswith("ws_") else os.path.abspath(ref)


def scoped(args: Args, params: dict[str, Any]) -> dict[str, Any]:
    """The workspace the command runs in, or with --all the owner's view of every workspace."""
    if args.all:
        params.update(scope="all", owner_token=owner_token())
    else:
        params["workspace"] = workspace_of(args)
    return params


def project_root(start: str) -> str:
    """The nearest directory upwards that looks like a project root (.git, memory/, spec/memory), else start."""
    current = os.path.abspath(start)
    while True:
        if any(os.path.exists(os.path.join(current, marker)) for marker in (".git", "memory", "spec/memory")):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return os.path.abspath(start)
        current = parent


def init_root(args: Args) -> str:
    """The directory `init` registers: PATH, else the one --workspace (or the environment) names by path, else the
    project around the current directory."""
    named = None if args.path else workspace_given(args)
    if args.path or (named and not named.startswith("ws_")):
        return os.path.abspath(args.path or str(named))
    return project_root(os.getcwd())


# --- the connection ---------------------------------------------------------------------------------------------


def socket_of(args: Args) -> str:
    """--socket, else MEMORYD_SOCKET, else the standard location (memorydirs)."""
    from memorydirs import socket_path

    return str(socket_path(args.socket))


def timeout_of(args: Args) -> float:
    """--timeout, else MEMORYCTL_TIMEOUT, else 30 s (a bad MEMORYCTL_TIMEOUT is a ClientError, exit 2)."""
    return float(args.timeout) if args.timeout else environ_timeout(30.0)


def open_connection(args: Args, path: str, timeout: float) -> Connection:
    """A connection to the daemon; with --autostart one is started in the background when none answers."""
    return connect(path, timeout, bool(args.autostart))


# --- output -----------------------------------------------------------------------------------------------------


def write(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


def to_json(value: Any, ascii: bool = False) -> str:
    """One JSON line as `--json` prints it: UTF-8 text kept as is (``ascii``: escaped, as `install --json` has)."""
    from memoryctl import wire

    return wire.dumps(value, ensure_ascii=ascii)


def emit_error(args: Args | None, name: str, message: str, hint: str, extra: dict[str, Any] | None = None) -> None:
    """The error as the JSON envelope on stdout (--json), else as `memoryctl: NAME: message` and a hint on stderr."""
    if args is not None and getattr(args, "json", False):
        error: dict[str, Any] = {"name": name, "message": message, "hint": hint}
        if extra:
            error.update({k: v for k, v in extra.items() if k not in ("name", "hint")})
        write(to_json({"ok": False, "error": error}))
    else:
        sys.stderr.write(f"memoryctl: {name}: {message}\n")
        if extra and extra.get("errors"):
            for problem in extra["errors"]:
                sys.stderr.write(f"  - {problem.get('loc')}: {problem.get('msg')}\n")
        if extra and extra.get("violations"):
            for violation in extra["violations"]:
                sys.stderr.write(f"  - {violation.get('pointer') or '(root)'}: {violation.get('reason')}\n")
        if hint:
            sys.stderr.write(f"hint: {hint}\n")


def human_dict(data: Any, indent: str = "") -> str:
    if not isinstance(data, dict):
        return f"{indent}{data}"
    lines = []
    for key, value in data.items():
        if isinstance(value, dict):
            lines.append(f"{indent}{key}:")
            lines.append(human_dict(value, indent + "  "))
        elif isinstance(value, list):
            lines.append(f"{indent}{key}: {len(value)} item(s)")
            for item in value:
                shown = ", ".join(f"{k}={v}" for k, v in item.items()) if isinstance(item, dict) else item
                lines.append(f"{indent}  - {shown}")
        else:
            lines.append(f"{indent}{key}: {value}")
    return "\n".join(lines)


# --- the global options -----------------------------------------------------------------------------------------

GLOBAL_EPILOG = "Global options (--json, --socket, --timeout, --autostart, --workspace): see memoryctl --help."
# The global options that take a value (the quick parser and the verb finder skip their values).
VALUE_OPTIONS = {"--socket": "socket", "--timeout": "timeout", "--workspace": "workspace", "-w": "workspace"}
FLAG_OPTIONS = {"--json": "json", "--autostart": "autostart"}


def common_parser(top: bool) -> argparse.ArgumentParser:
    """Global options, accepted before or after the verb. Below the top level their defaults are
    SUPPRESS, so a subparser never overwrites what was given before the verb."""
    import argparse

    common = argparse.ArgumentParser(add_help=False)
    extra: dict[str, Any] = {} if top else {"default": argparse.SUPPRESS}

    def say(text: str) -> str:  # shown once, in `memoryctl --help`; each verb's help points there
        return text if top else argparse.SUPPRESS

    common.add_argument("--json", action="store_true", help=say('machine output: {"ok": true, "data": …}'), **extra)
    common.add_argument(
        "--socket", help=say("daemon socket (default: MEMORYD_SOCKET or the standard location)"), **extra
    )
    common.add_argument(
        "--timeout",
        type=timeout_arg,
        metavar="SECONDS",
        help=say("seconds to wait for an answer (default: MEMORYCTL_TIMEOUT, else 30)"),
        **extra,
    )
    common.add_argument(
        "--autostart", action="store_true", help=say("start memoryd in the background if needed"), **extra
    )
    common.add_argument(
        "--workspace",
        "-w",
        help=say(
            "workspace id or path (default: MEMORYD_WORKSPACE, else EMBEDDED_MEMORY_ROOT, else the one containing cwd)"
        ),
        **extra,
    )
    return common


def timeout_arg(text: str) -> float:
    try:
        return parse_timeout(text)
    except ValueError as exc:
        import argparse

        raise argparse.ArgumentTypeError(str(exc)) from None
