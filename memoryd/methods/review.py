"""items and changes.show: the reads the review page (`memoryctl ui`) needs beside search, get and the rules'
methods — the entries remember wrote with their forgotten marks, and one recorded change as per-file diffs."""

from __future__ import annotations

from memoryd.methods.services import Ctx, Handlers, services
from memoryd.rules.api import ChangeShowParams, ChangeShowResult, ItemsParams, ItemsResult


def register(d: Handlers) -> None:
    @d.register("items", ItemsParams, ItemsResult)
    async def items(ctx: Ctx, p: ItemsParams) -> ItemsResult:
        """The entries remember wrote (ids, where they are, forgotten or not), by path and line, a page at a time:
        what the review page's memory browser marks in a file."""
        app = services(ctx)
        return await app.rules.items(await app.workspace(p.workspace), p.path, p.offset, p.limit)

    @d.register("changes.show", ChangeShowParams, ChangeShowResult)
    async def changes_show(ctx: Ctx, p: ChangeShowParams) -> ChangeShowResult:
        """One recorded change: its history line and, per file, a unified diff from its backup to what it left
        (the next change's backup of the file, or the file now); whether a restore undid it."""
        app = services(ctx)
        return await app.rules.show_change(await app.workspace(p.workspace), p.run_id)
