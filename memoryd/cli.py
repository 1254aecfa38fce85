"""`memoryd serve | install-service`. Exit 3 when startup fails, with a message that says what to do."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from memoryd import __version__

EXIT_STARTUP = 3


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memoryd", description="The memoryd daemon.")
    parser.add_argument("--version", action="version", version=f"memoryd {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = sub.add_parser("serve", help="run the daemon in the foreground")
    serve.add_argument("--socket", help="socket path (default: MEMORYD_SOCKET, else <run dir>/memoryd.sock)")
    serve.add_argument("--home", help="one directory for config, state and run (default: MEMORYD_HOME or XDG)")
    serve.add_argument(
        "--log-level", choices=["debug", "info", "warning", "error"], help="default: the log_level setting (info)"
    )
    install = sub.add_parser("install-service", help="write the systemd user units or the launchd agent")
    install.add_argument("--print", action="store_true", help="print the files instead of writing them")
    install.add_argument("--home", help="bake this MEMORYD_HOME into the units")
    return parser


def serve(args: argparse.Namespace) -> int:
    # One BLAS thread per search: the daemon runs searches side by side (one per core), so a matrix product that
    # spread over every core as well would only make them wait on each other (8 clients: 1.2× one client, not 1.9×).
    # Set before numpy is first imported; a value the user set is kept.
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, "1")
    import anyio

    from memoryd import log as logsetup
    from memoryd.app import App
    from memoryd.config import SettingsError, load_settings
    from memoryd.server import Server, StartupError

    try:
        settings = load_settings(home=args.home, socket=args.socket, overrides={"log_level": args.log_level})
    except SettingsError as exc:
        sys.stderr.write(f"memoryd: {exc}\n")
        return EXIT_STARTUP
    logsetup.configure(settings.server.log_level)
    try:
        app = App(settings)
        server = Server(settings, app)
        return anyio.run(server.run, backend_options=_loop_options())
    except StartupError as exc:
        sys.stderr.write(f"memoryd: {exc}\n")
        return EXIT_STARTUP
    except OSError as exc:
        sys.stderr.write(f"memoryd: cannot start: {exc}\n")
        return EXIT_STARTUP
    except KeyboardInterrupt:
        return 130


def _loop_options() -> dict[str, bool]:
    """uvloop where it is installed (a dependency on Linux and macOS): it halves the event loop's own cost per
    request, which is what bounds concurrent searches (docs/benchmarks.md, "Parallel search")."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return {}
    return {"use_uvloop": True}


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    if not (sys.argv[1:] if argv is None else list(argv)):
        parser.print_help(sys.stderr)
        sys.stderr.write("\nmemoryd: say what to do; to run the daemon in the foreground: memoryd serve\n")
        return 2
    args = parser.parse_args(argv)
    if args.command == "serve":
        return serve(args)
    from memoryd.units import install_service

    return install_service(print_only=args.print, home=args.home, out=sys.stdout)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


def entry() -> None:
    sys.exit(main())
