"""The per-workspace state the rules service keeps: evidence store, rule set, write lock and resolve cache."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from memoryd.rules.evidence import EvidenceStore
from memoryd.rules.ruleset import RuleSet
from memoryd.workspaces import Workspace

if TYPE_CHECKING:
    from memoryd.methods import rules as m


@dataclass(eq=False)
class WorkspaceRules:
    ws: Workspace
    evidence: EvidenceStore
    rules: RuleSet
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    opened: anyio.Event = field(default_factory=anyio.Event)
    open_error: str | None = None
    recovered: list[str] = field(default_factory=list)
    # resolve answers ready to send, valid for one rule-set generation
    answers: dict[tuple[str, str, str | None], m.ResolveResult] = field(default_factory=dict)
    answers_generation: int = -1

    @property
    def root(self) -> Path:
        return self.ws.path
