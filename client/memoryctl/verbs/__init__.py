"""The verbs of memoryctl, registered in one table: each verb's one-line help and the group module that serves it.

A group module (notes, rules, lifecycle, admin) exports the same five functions — see ``VerbGroup`` — and a ``QUICK`` table
(the verbs it lets skip argparse). cli.py imports only the group of the verb on the command line, so `memoryctl
search` never loads the rules' or the installer's code.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `import typing` costs ~3 ms of start-up
if TYPE_CHECKING:
    import argparse
    from typing import Any, Protocol

    from memoryctl.common import Args
    from memoryctl.quick import Spec
    from memoryctl.rpc import Connection

    class VerbGroup(Protocol):
        """What a verb group module exports (a module satisfies this Protocol; mypy checks each one)."""

        QUICK: dict[str, Spec]  # verbs whose plain command lines are read without argparse

        def configure(self, verb: str, p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
            """Add the verb's arguments (and its sub-actions' parsers) to ``p``."""

        def local(self, args: Args, path: str, timeout: float) -> int | None:
            """Run a verb that is not one call (install writes files, mcp serves); None for a call."""

        def call(self, args: Args) -> tuple[str, dict[str, Any]]:
            """The method and params the verb sends (raises Usage for a bad command line)."""

        def exchange(self, conn: Connection, args: Args, method: str, params: dict[str, Any]) -> Any:
            """Send the call and return the result (most verbs: ``conn.call(method, params)``)."""

        def render(self, args: Args, result: Any) -> str:
            """The result for a person."""

        def exit_code(self, args: Args, result: Any) -> int:
            """The exit code once the result is printed (validate's problems exit 1)."""


VERBS = {
    "ping": "is the daemon alive?",
    "status": "daemon and workspace status",
    "workspace": "the workspace registry",
    "init": "register the project containing the cwd",
    "remember": "append an entry to today's daily file",
    "search": "search memory (words and meaning; Chinese works)",
    "get": "read lines of a memory file",
    "index": "bring the index up to date",
    "validate": "check layout, headings and paths",
    "context": "what a host injects: stable rules and memory, then recall for a prompt",
    "mcp": "serve this project's memory to an agent over MCP (stdio)",
    "ui": "review memory, rules, provenance and history in a local browser page",
    "install": "configure Claude Code, Codex or OpenCode to use memoryd (hooks and MCP server)",
    "forget": "hide a remembered entry from search and context (kept for audit; restore undoes it)",
    "restore": "undo a recorded change by its run id (forget, compile apply, promote, archive, ttl, restore)",
    "archive": "move daily files older than N days to memory/archive/ (--dry-run lists what would move)",
    "ttl": "delete archived days and INSIGHTS.md bullets past their TTL (--dry-run lists what would go)",
    "answer": "settle an open question about memory (a preference a consolidation wants to change): old, new or both",
    "observe": "record one observation (evidence)",
    "compile": "evidence to rules: prepare a request for the LLM, apply its response",
    "consolidate": "daily notes into MEMORY.md through the host's model: prepare a request, --apply its answers",
    "compact": "archived daily files into a HISTORY.md line through the host's model (answer with consolidate --apply)",
    "resolve": "merged facts for a model and firmware version, and why",
    "rules": "search, show and diff rules",
    "timeline": "observations, remembered entries and changes, newest first",
    "candidates": "review low-confidence rules: list, promote, reject",
    "hook": "answer a coding agent host's hook (its JSON on stdin); fails open, never blocks",
    "audit": "what the observability files say: outcomes, guard, sanitize, routing, recall, lifecycle; phase gates",
    "merge-file": "git's merge driver for memory files: merge by section, never conflict markers (init --git)",
}

NOTES = ("status", "init", "remember", "search", "get", "index", "validate", "context", "forget", "answer")
RULES = ("observe", "compile", "resolve", "rules", "timeline", "candidates")
ADMIN = ("ping", "workspace", "mcp", "ui", "install", "hook", "merge-file")
CURATE = ("consolidate", "compact")
AUDIT = ("audit",)
LIFECYCLE = ("restore", "archive", "ttl")


def group(verb: str) -> VerbGroup:
    """The module serving ``verb`` (imported on first use)."""
    if verb in NOTES:
        from memoryctl.verbs import notes

        return notes
    if verb in RULES:
        from memoryctl.verbs import rules

        return rules
    if verb in CURATE:
        from memoryctl.verbs import consolidate

        return consolidate
    if verb in AUDIT:
        from memoryctl.verbs import audit

        return audit
    if verb in LIFECYCLE:
        from memoryctl.verbs import lifecycle

        return lifecycle
    from memoryctl.verbs import admin

    return admin
