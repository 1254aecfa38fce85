"""memoryctl: verbs mirror the daemon's methods (`memoryctl workspace add` ↔ `workspace.add`).

Standard library only, so a hook or a person gets an answer in tens of milliseconds.
Exit codes: 0 ok, 1 application error, 2 usage, 3 daemon unavailable, 4 forbidden, 5 protocol error,
6 timeout, 130 interrupted (docs/reference/cli.md).
"""

from __future__ import annotations

import sys

from memoryctl import __version__
from memoryctl.common import (
    EXIT_APP,
    EXIT_CODES,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    GLOBAL_EPILOG,
    VALUE_OPTIONS,
    Args,
    PastEnd,
    Usage,
    common_parser,
    emit_error,
    open_connection,
    socket_of,
    timeout_of,
    to_json,
    write,
)
from memoryctl.rpc import ClientError, RemoteError
from memoryctl.verbs import VERBS, group

TYPE_CHECKING = False  # `import typing` costs ~3 ms of start-up
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

__all__ = ["EXIT_CODES", "VERBS", "build_parser", "entry", "main"]


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or (``only``) just the named verb's: building all of them costs ~10 ms, which a
    hook pays on every call."""
    import argparse

    common = common_parser(top=False)
    parser = argparse.ArgumentParser(
        prog="memoryctl", parents=[common_parser(top=True)], description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--version", action="version", version=f"memoryctl {__version__}")
    sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    for verb, help_text in VERBS.items():
        if only is None or verb == only:
            p = sub.add_parser(verb, parents=[common], help=help_text, description=help_text, epilog=GLOBAL_EPILOG)
            group(verb).configure(verb, p, common)
    return parser


def _first_word(argv: Sequence[str]) -> str | None:
    """The first word of the command line that is not an option or an option's value, found without building any
    parser: the verb, or a typo of one (`serch`)."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in VALUE_OPTIONS:
            skip = True
        elif not arg.startswith("-"):
            return arg
    return None


def _not_utf8(args_list: list[str]) -> str | None:
    """The first argument holding bytes that are not UTF-8 (Python keeps them as lone surrogates), escaped."""
    for arg in args_list:
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            return arg.encode("utf-8", "surrogateescape").decode("ascii", "backslashreplace")
    return None


def _parse(args_list: list[str], verb: str | None) -> Args | int:
    """The command line read: by the verb's quick reader when it is plain, else by argparse (an int: the exit code
    of --help, --version or a usage error, already printed)."""
    if verb is not None and (spec := group(verb).QUICK.get(verb)) is not None:
        from memoryctl import quick

        args = quick.parse(args_list, verb, spec)
        if args is not None:
            return args
    try:
        return build_parser(verb).parse_args(args_list, namespace=Args())
    except SystemExit as exc:
        return int(exc.code or 0) if isinstance(exc.code, int) else EXIT_USAGE


def main(argv: Sequence[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else list(argv)
    word = _first_word(args_list)
    if word == "hook" and not {"-h", "--help"} & set(args_list):
        from memoryctl.hooks import main as hook  # fail-open, deadlines, no argparse: it runs on every prompt

        return hook(args_list)
    bad = _not_utf8(args_list)
    if bad is not None:
        as_json = Args(json="--json" in args_list)
        emit_error(as_json, "USAGE", f"an argument is not UTF-8 text: {bad}", "Pass text and paths as UTF-8.")
        return EXIT_USAGE
    if args_list[:1] == ["help"]:  # `memoryctl help [VERB …]` is `memoryctl [VERB …] --help`
        args_list = [*args_list[1:], "--help"]
        word = _first_word(args_list)
    if word is not None and word not in VERBS:
        import difflib

        close = difflib.get_close_matches(word, list(VERBS), n=1, cutoff=0.6)
        emit_error(
            None,
            "USAGE",
            f"unknown command {word!r}" + (f"; did you mean {close[0]!r}?" if close else ""),
            "memoryctl --help lists the commands.",
        )
        return EXIT_USAGE
    parsed = _parse(args_list, word)
    if isinstance(parsed, int):
        return parsed
    return run(parsed)


def run(args: Args) -> int:
    """One verb, parsed: its call sent and its answer printed; every failure printed as an error with its code."""
    verbs = group(args.verb)
    path = socket_of(args)
    try:
        timeout = timeout_of(args)
        code = verbs.local(args, path, timeout)
        if code is not None:
            return code
        method, params = verbs.call(args)
        with open_connection(args, path, timeout) as conn:
            result = verbs.exchange(conn, args, method, params)
        write(to_json({"ok": True, "data": result}) if args.json else verbs.render(args, result))
    except Usage as exc:
        emit_error(args, "USAGE", str(exc), exc.hint)
        return EXIT_USAGE
    except ClientError as exc:
        emit_error(args, exc.name, exc.message, exc.hint)
        return exc.exit_code
    except RemoteError as exc:
        emit_error(args, exc.name, exc.message, exc.hint, exc.data)
        return EXIT_CODES.get(exc.name, EXIT_APP)
    except PastEnd as exc:
        emit_error(args, "PAST_END", str(exc), "Start lower: --from 1 reads from the top.")
        return EXIT_APP
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return verbs.exit_code(args, result)


def entry() -> None:
    sys.exit(main())
