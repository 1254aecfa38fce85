"""What ``audit`` summarizes: the configuration of the one summarizer (``memoryd/curate/summarize.py``).

One :class:`MetricSpec` per metric; adding one is adding an entry here. The files' shapes are in
docs/reference/curation.md ("Observability and audit").
"""

from __future__ import annotations

from memoryd.curate import observe
from memoryd.curate.summarize import Above, Match, MetricSpec, Not, Prefix, Rate, one_of

WRITTEN = one_of("written", "sanitize_modified")  # sanitize_modified: written, after sanitize changed it

OUTCOMES = MetricSpec(
    name="outcomes",
    file=observe.OUTCOMES,
    title="Update outcomes",
    shape={"outcome": (str,), "target": (str,)},
    group_by=("target",),
    tally=("outcome",),
    sums=("counts.added", "counts.removed", "counts.duplicates", "counts.sanitized"),
    rates=(
        Rate("written", {"outcome": WRITTEN}),
        Rate("guard_rejected", {"outcome": one_of("guard_rejected")}),
        Rate("sanitize_modified", {"outcome": one_of("sanitize_modified")}),
        Rate("no_change", {"outcome": one_of("no_change")}),
        Rate("truncated_skip", {"outcome": one_of("truncated_skip")}),
    ),
)

GUARD = MetricSpec(
    name="guard",
    file=observe.OUTCOMES,
    title="Loss guard: updates held",
    shape={"outcome": (str,), "target": (str,)},
    where={"outcome": one_of("guard_rejected")},
    group_by=("target",),
    tally=("reason",),
)

SANITIZE = MetricSpec(
    name="sanitize",
    file=observe.SANITIZE,
    title="Sanitize: what was dropped",
    shape={"target": (str,), "dropped": (dict,)},
    group_by=("target",),
    sums=("dropped",),
)

ROUTING = MetricSpec(
    name="routing",
    file=observe.ROUTING,
    title="Daily routing",
    shape={"mode": (str,), "result": (str,)},
    group_by=("mode",),
    tally=("result",),
    sums=("sections",),
    rates=(
        Rate("routed", {"result": one_of("routed")}),
        Rate("fallback", {"result": one_of("fallback")}),
        Rate("missing", {"result": one_of("missing")}),
        Rate("invalid", {"result": one_of("invalid")}),
        Rate("rejected", {"result": one_of("rejected")}),
        Rate("fallback_or_missing", {"result": one_of("fallback", "missing")}),
    ),
)

RECALL = MetricSpec(
    name="recall",
    file=observe.RECALL,
    title="Recall for prompts (context trace)",
    shape={"trigger": (str,), "hits": (int,), "injected": (int,)},
    tally=("trigger", "past"),
    sums=("hits", "injected", "recent"),
    rates=(
        Rate("found", {"hits": Above(0)}),  # the search found something
        Rate("injected", {"injected": Above(0)}),  # and something cleared the floor and was injected
        Rate("injected_when_found", {"injected": Above(0)}, {"hits": Above(0)}),
        Rate("asks_about_past", {"past": one_of(True)}),
    ),
)

LIFECYCLE = MetricSpec(
    name="lifecycle",
    file=observe.LIFECYCLE,
    title="Lifecycle runs",
    shape={"action": (str,), "dry_run": (bool,), "files": (int,), "bytes": (int,)},
    group_by=("action",),
    tally=("dry_run",),
    sums=("files", "bytes"),
    rates=(Rate("dry_run", {"dry_run": one_of(True)}),),
)

HISTORY = MetricSpec(
    name="history",
    file=observe.HISTORY,
    title="Changes (history.jsonl)",
    shape={"run_id": (str,)},
    group_by=("kind", "op"),  # the typed kind (consolidate, archive, ttl, compact) when the line has one
    tally=("op",),
    rates=(Rate("restores", {"op": one_of("restore")}),),
)

AUDIT = (OUTCOMES, GUARD, SANITIZE, ROUTING, RECALL, LIFECYCLE, HISTORY)

# The routing phase gates (seed 002 §7) read these rows the same way.
GUARD_COUNTED: Match = {"outcome": one_of("guard_rejected"), "reason": Not(Prefix("heading_retention"))}
