"""What every rule-changing method shares: a rule merged with a proposal or a promoted candidate, the history
metadata of a rule's revisions, the answer's planned writes, and the refusal to overwrite a broken rule file.

The changing methods themselves live in ``prepare`` (compile.prepare), ``apply`` (compile.apply) and
``candidates`` (candidates promote/reject). Each runs in a worker thread under the workspace lock (``RulesService``
takes it); every multi-file change goes through ``journal.commit``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from memoryd.errors import AppError
from memoryd.rules import api as m
from memoryd.rules import journal
from memoryd.rules.fwrange import parse_range
from memoryd.rules.models import ProposedOverride, ProposedRule, Rule
from memoryd.rules.ruleset import flatten
from memoryd.rules.workspace import WorkspaceRules

REQUESTS_DIR = "data/memory/compile"


def refuse_broken(wr: WorkspaceRules, path: str) -> None:
    for error in wr.rules.errors():
        if error.startswith(path + ":"):
            raise AppError(
                "MEMORY_CONFLICT",
                f"{path} is not valid ({error.split(': ', 1)[-1]}); fix it before applying",
                hint="`memoryctl validate` shows the problem; the last good version is still in effect.",
            )


def override_rule_id(model_id: str, fw_range: str) -> str:
    return f"{model_id[:100]}-{hashlib.sha256(fw_range.encode()).hexdigest()[:8]}"


def merge(
    old: Rule | None,
    item: ProposedRule | ProposedOverride,
    rule_id: str,
    now: str,
    request_id: str,
    extra: dict[str, Any],
) -> Rule:
    """The rule after ``item`` is applied to ``old``: facts merged (null removes), provenance united."""
    facts = dict(old.facts) if old else {}
    for key, value in flatten(item.facts).items():
        if value is None:
            facts.pop(key, None)
        else:
            facts[key] = value
    cited = list(old.provenance.observation_ids) if old else []
    cited += [oid for oid in item.provenance.observation_ids if oid not in cited]
    content = {
        "rule_id": rule_id,
        "model_id": item.model_id,
        "fw_range": parse_range(item.fw_range).text,
        "priority": item.priority,
        "summary": item.summary if item.summary is not None else (old.summary if old else None),
        "facts": facts,
        "confidence": item.confidence,
        **extra,
    }
    if old is not None:
        same = all(getattr(old, key) == value for key, value in content.items()) and cited == list(
            old.provenance.observation_ids
        )
        if same:
            return old
    return Rule.model_validate(
        {
            **content,
            "provenance": {"observation_ids": cited, "request_id": request_id},
            "revision": old.revision + 1 if old else 1,
            "created_at": old.created_at if old else now,
            "updated_at": now,
        }
    )


def promoted(old: Rule | None, fields: dict[str, Any], now: str) -> Rule:
    facts = {**(old.facts if old else {}), **fields["facts"]}
    cited = list(old.provenance.observation_ids) if old else []
    cited += [o for o in fields["provenance"]["observation_ids"] if o not in cited]
    data = {
        **{k: v for k, v in fields.items() if v is not None},
        "facts": facts,
        "provenance": {**fields["provenance"], "observation_ids": cited},
        "revision": old.revision + 1 if old else 1,
        "created_at": old.created_at if old else now,
        "updated_at": now,
    }
    return Rule.model_validate(data)


def revs(old: Rule | None, new: Rule) -> dict[str, Any]:
    return {"rule_id": new.rule_id, "rev_before": old.revision if old else None, "rev_after": new.revision}


def planned(root: Path, writes: list[journal.FileWrite]) -> list[m.PlannedWrite]:
    """What each write would do (the answer's ``writes``): path, action, layer and, for a one-rule file, the rule
    and its new revision (from the write's history metadata, see :func:`revs`)."""
    out = []
    for write in writes:
        rules = write.meta.get("rules") or []
        one = rules[0] if len(rules) == 1 else {}
        out.append(
            m.PlannedWrite(
                path=write.path,
                action=journal.action(journal.read_bytes(root, write.path), write.content),
                layer=write.meta.get("layer"),
                rule_id=one.get("rule_id"),
                revision=one.get("rev_after"),
            )
        )
    return out
