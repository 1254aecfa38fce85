"""Curation: what keeps memory from only growing (issue "Curate", seed 002).

Consolidation into MEMORY.md / INSIGHTS.md / HISTORY.md through the compile exchange, the policy that guards it
(sanitize, loss guard, preference conflicts), the lifecycle of daily files (archive, TTL, compact) and the
observability rows that give every rate a denominator. It sits between ``context`` (which shows its questions and
insights) and ``rules`` (whose change journal and restore it writes through).
"""
