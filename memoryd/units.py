"""``memoryd install-service``: render and install the per-user service units.

Linux: systemd user units (``memoryd.socket`` + ``memoryd.service``, socket activation) under
``$XDG_CONFIG_HOME/systemd/user``. macOS: a LaunchAgent under ``~/Library/LaunchAgents``.

The templates live in the repository's ``systemd/`` and ``launchd/`` directories and, byte for byte, in the
package (``memoryd/units/``), so an installed wheel can render them too. Placeholders:

``@MEMORYD_EXE@``     the command that runs memoryd (absolute path of the console script)
``@MEMORYD_SOCKET@``  the socket path (systemd: ``%t/memoryd/memoryd.sock`` unless it lies elsewhere)
``@MEMORYD_ENV@``     a whole line: ``Environment=`` lines / the ``EnvironmentVariables`` dict, or nothing
``@MEMORYD_LOG@``     the log file (launchd's stdout/stderr)

This module never runs ``systemctl`` or ``launchctl``; it writes the files (atomically, keeping a ``.bak`` of a
file it replaces) and prints the commands to run next. Standard library only, plus ``memoryd.fsio``.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TextIO
from xml.sax.saxutils import escape as _xml_escape

from memorydirs import SOCKET_NAME, resolve_dirs, socket_path

from memoryd.fsio import atomic_write, make_private_dir

LABEL = "dev.memoryd.memoryd"
SYSTEMD_UNITS = ("memoryd.socket", "memoryd.service")
LAUNCHD_PLIST = f"{LABEL}.plist"
TEMPLATE_NAMES = (*SYSTEMD_UNITS, LAUNCHD_PLIST)
PLACEHOLDERS = ("@MEMORYD_EXE@", "@MEMORYD_SOCKET@", "@MEMORYD_ENV@", "@MEMORYD_LOG@")
SYSTEMD_RUNTIME_SOCKET = f"%t/memoryd/{SOCKET_NAME}"

# sun_path is 108 bytes on Linux and 104 on macOS, including the terminating NUL.
_SUN_PATH_MAX = {"linux": 107, "darwin": 103}


@dataclass(frozen=True)
class UnitFile:
    path: Path
    text: str


def template_text(name: str) -> str:
    """A template shipped inside the package (``memoryd/units/<name>``)."""
    if name not in TEMPLATE_NAMES:
        raise ValueError(f"unknown unit template: {name!r}")
    return resources.files("memoryd").joinpath("units", name).read_text(encoding="utf-8")


def _check_value(value: str, what: str) -> str:
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        raise ValueError(f"{what} contains a control character: {value!r}")
    return value


# --- systemd ------------------------------------------------------------------------------------------


def _systemd_specifiers(value: str) -> str:
    """``%`` starts a specifier in every unit-file setting that expands them."""
    return value.replace("%", "%%")


def _systemd_exec_arg(arg: str) -> str:
    """One word of an ``ExecStart=`` command line (systemd.service(5) "Command lines")."""
    _check_value(arg, "command argument")
    word = _systemd_specifiers(arg).replace("$", "$$")
    if word and not any(ch in word for ch in " \t\"'\\;"):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _systemd_environment(name: str, value: str) -> str:
    _check_value(value, name)
    assignment = _systemd_specifiers(f"{name}={value}").replace("\\", "\\\\").replace('"', '\\"')
    return f'Environment="{assignment}"'


# --- launchd ------------------------------------------------------------------------------------------


def _xml(value: str) -> str:
    return _xml_escape(_check_value(value, "plist value"))


def _plist_environment(env: dict[str, str]) -> str:
    if not env:
        return ""
    lines = ["\t<key>EnvironmentVariables</key>", "\t<dict>"]
    for name, value in env.items():
        lines += [f"\t\t<key>{_xml(name)}</key>", f"\t\t<string>{_xml(value)}</string>"]
    lines.append("\t</dict>")
    return "\n".join(lines)


# --- rendering ----------------------------------------------------------------------------------------


def _substitute(template: str, values: dict[str, str]) -> str:
    """Replace placeholders; ``@MEMORYD_ENV@`` stands on a line of its own, which goes away when empty."""
    env = values.pop("@MEMORYD_ENV@", "")
    out_lines: list[str] = []
    for line in template.splitlines(keepends=True):
        if line.strip() == "@MEMORYD_ENV@":
            if env:
                out_lines.append(env + "\n")
            continue
        out_lines.append(line)
    text = "".join(out_lines)
    for placeholder, value in values.items():
        text = text.replace(placeholder, value)
    left = [p for p in PLACEHOLDERS if p in text]
    if left:  # pragma: no cover - the templates and this module change together
        raise ValueError(f"unsubstituted placeholders: {', '.join(left)}")
    return text


def render_units(
    *,
    platform: str,
    exe: str | Sequence[str],
    home: Path | None,
    socket: Path,
    log_file: Path,
    user_home: Path,
    runtime_dir: Path | None = None,
    config_home: Path | None = None,
) -> list[UnitFile]:
    """Render the unit files for ``platform`` ("linux" or "darwin") with their target paths.

    ``exe`` is the command that runs memoryd: the absolute path of the console script, or an argv prefix such
    as ``[python, "-m", "memoryd"]``. ``home`` is ``MEMORYD_HOME`` (None for the platform default dirs),
    ``socket`` the socket clients connect to. ``runtime_dir`` is the user's ``XDG_RUNTIME_DIR``: when the socket
    is ``<runtime_dir>/memoryd/memoryd.sock`` the socket unit says ``%t/memoryd/memoryd.sock``.
    ``config_home`` is ``XDG_CONFIG_HOME`` (default ``<user_home>/.config``).
    """
    argv = [exe] if isinstance(exe, str) else list(exe)
    if not argv or not Path(argv[0]).is_absolute():
        raise ValueError(f"the memoryd command must start with an absolute path: {argv!r}")
    env: dict[str, str] = {}
    if home is not None:
        env["MEMORYD_HOME"] = str(home)

    if platform == "linux":
        if home is None and runtime_dir is not None and socket == runtime_dir / "memoryd" / SOCKET_NAME:
            listen = SYSTEMD_RUNTIME_SOCKET
        else:
            listen = _systemd_specifiers(_check_value(str(socket), "socket path"))
            # The daemon takes the listening socket from systemd; it still learns the path, for status.
            if home is None or socket != home / "run" / SOCKET_NAME:
                env["MEMORYD_SOCKET"] = str(socket)
        values = {
            "@MEMORYD_EXE@": " ".join(_systemd_exec_arg(arg) for arg in argv),
            "@MEMORYD_SOCKET@": listen,
            "@MEMORYD_ENV@": "\n".join(_systemd_environment(k, v) for k, v in env.items()),
            "@MEMORYD_LOG@": _systemd_specifiers(str(log_file)),
        }
        unit_dir = (config_home if config_home is not None else user_home / ".config") / "systemd" / "user"
        return [UnitFile(unit_dir / name, _substitute(template_text(name), dict(values))) for name in SYSTEMD_UNITS]

    if platform == "darwin":
        default_root = home if home is not None else user_home / "Library" / "Application Support" / "memoryd"
        if socket != default_root / "run" / SOCKET_NAME:
            env["MEMORYD_SOCKET"] = str(socket)  # launchd does not pass a socket: the daemon binds it itself
        values = {
            "@MEMORYD_EXE@": "</string>\n\t\t<string>".join(_xml(arg) for arg in argv),
            "@MEMORYD_SOCKET@": _xml(str(socket)),
            "@MEMORYD_ENV@": _plist_environment(env),
            "@MEMORYD_LOG@": _xml(str(log_file)),
        }
        target = user_home / "Library" / "LaunchAgents" / LAUNCHD_PLIST
        return [UnitFile(target, _substitute(template_text(LAUNCHD_PLIST), values))]

    raise ValueError(f"install-service supports linux (systemd) and darwin (launchd), not {platform!r}")


# --- installing ---------------------------------------------------------------------------------------


def memoryd_command() -> list[str]:
    """How the service manager should start memoryd: the console script that is running now, if it is one."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if argv0 is not None and argv0.name == "memoryd" and os.access(argv0, os.X_OK) and argv0.is_file():
        return [str(argv0.absolute())]
    sibling = Path(sys.executable).parent / "memoryd"  # the console script of this interpreter's environment
    if sibling.is_file() and os.access(sibling, os.X_OK):
        return [str(sibling.absolute())]
    found = shutil.which("memoryd")
    if found:
        return [str(Path(found).absolute())]
    return [str(Path(sys.executable).absolute()), "-m", "memoryd"]


def _backup_path(path: Path, current: bytes) -> Path | None:
    """Where to keep ``path``'s current content: ``<name>.bak``, or ``<name>.bak.N`` so no backup is lost.

    None when an existing backup already holds exactly this content.
    """
    candidates = [path.with_name(path.name + ".bak")]
    candidates += [path.with_name(f"{path.name}.bak.{n}") for n in range(1, 1000)]
    for candidate in candidates:
        try:
            if candidate.read_bytes() == current:
                return None
        except FileNotFoundError:
            return candidate
    raise OSError(f"too many backups of {path}")  # pragma: no cover


def _install_one(unit: UnitFile) -> tuple[str, Path | None]:
    data = unit.text.encode("utf-8")
    try:
        current: bytes | None = unit.path.read_bytes()
    except FileNotFoundError:
        current = None
    if current == data:
        return "unchanged", None
    backup = None
    if current is not None:
        backup = _backup_path(unit.path, current)
        if backup is not None:
            atomic_write(backup, current, mode=0o644)
    atomic_write(unit.path, data, mode=0o644)
    return ("created" if current is None else "updated"), backup


def install_service(  # noqa: C901, PLR0912, PLR0915 (one linear script per service manager)
    *,
    print_only: bool,
    home: str | None,
    out: TextIO,
    err: TextIO | None = None,
    platform: str | None = None,
) -> int:
    """Render the units for this user and either print them (``--print``) or install them. Returns the exit code."""
    err = err if err is not None else sys.stderr
    platform = platform or sys.platform
    if platform.startswith("linux"):
        platform = "linux"
    if platform not in ("linux", "darwin"):
        err.write(f"memoryd install-service: unsupported platform {platform!r} (supported: linux, darwin)\n")
        return 2

    dirs = resolve_dirs(home)
    memoryd_home = Path(dirs.home) if dirs.home is not None else None
    log_file = Path(dirs.log_file)
    socket = Path(socket_path(None, home))
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    guessed_runtime = False
    if platform == "linux" and memoryd_home is None and not runtime and not os.environ.get("MEMORYD_SOCKET"):
        # A shell without a login session (ssh -T, su, cron) has no XDG_RUNTIME_DIR, but the user's systemd
        # manager always has one: the units say %t like everywhere else, and the user hears how to match.
        runtime = f"/run/user/{os.getuid()}"
        socket = Path(runtime) / "memoryd" / SOCKET_NAME
        guessed_runtime = True
    config_home = os.environ.get("XDG_CONFIG_HOME")
    try:
        units = render_units(
            platform=platform,
            exe=memoryd_command(),
            home=memoryd_home,
            socket=socket,
            log_file=log_file,
            user_home=Path.home(),
            runtime_dir=Path(runtime) if runtime else None,
            config_home=Path(config_home) if config_home else None,
        )
    except ValueError as exc:
        err.write(f"memoryd install-service: {exc}\n")
        return 2

    if guessed_runtime:
        err.write(
            f"memoryd install-service: XDG_RUNTIME_DIR is not set in this shell; the socket unit listens on "
            f"{SYSTEMD_RUNTIME_SOCKET} ({socket}), where memoryctl looks in a login session. In this shell: "
            f"export XDG_RUNTIME_DIR={runtime}\n"
        )
    if print_only:
        for unit in units:
            out.write(f"# {unit.path}\n{unit.text}")
        return 0

    warnings: list[str] = []
    if len(os.fsencode(str(socket))) > _SUN_PATH_MAX[platform] and not (
        platform == "linux" and any(SYSTEMD_RUNTIME_SOCKET in u.text for u in units)
    ):
        warnings.append(
            f"the socket path is too long for a Unix socket ({len(os.fsencode(str(socket)))} bytes): {socket}; "
            "choose a shorter MEMORYD_HOME or set MEMORYD_SOCKET"
        )

    changed = False
    updated = False
    try:
        if platform == "darwin":
            # launchd opens the log before memoryd starts, and does not create its directory.
            make_private_dir(log_file.parent)
        for unit in units:
            state, backup = _install_one(unit)
            changed = changed or state != "unchanged"
            updated = updated or state == "updated"
            line = f"{state}: {unit.path}"
            if backup is not None:
                line += f" (previous version kept in {backup})"
            out.write(line + "\n")
    except OSError as exc:
        err.write(f"memoryd install-service: cannot write the unit files: {exc}\n")
        return 1

    for warning in warnings:
        err.write(f"memoryd install-service: warning: {warning}\n")

    ping = "memoryctl ping"
    if memoryd_home is not None:
        ping = f"MEMORYD_HOME={shlex.quote(str(memoryd_home))} {ping}"
    out.write("\nNext, run:\n")
    if platform == "linux":
        out.write("  systemctl --user daemon-reload && systemctl --user enable --now memoryd.socket\n")
        if updated:
            out.write("If memoryd was already running, apply the change with:\n")
            out.write("  systemctl --user restart memoryd.socket\n")
        out.write(f"Check it with: {ping}   (logs: journalctl --user -u memoryd.service)\n")
        out.write('To keep it running without a login session: loginctl enable-linger "$USER"\n')
    else:
        plist = shlex.quote(str(units[0].path))
        if updated:
            out.write(
                f"  launchctl bootout gui/$(id -u)/{LABEL} 2>/dev/null; launchctl bootstrap gui/$(id -u) {plist}\n"
            )
        else:
            out.write(f"  launchctl bootstrap gui/$(id -u) {plist}\n")
        out.write(f"Check it with: {ping}   (log: {log_file})\n")
    if not changed:
        out.write("(the unit files were already up to date)\n")
    return 0
