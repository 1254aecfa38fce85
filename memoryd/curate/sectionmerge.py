"""Section merge of MEMORY.md and INSIGHTS.md, as the consolidation pipeline uses it: ``client/memorysections``
(shared with the client's git merge driver). ``key`` and ``title`` are what makes two bullets, two section titles,
the same — the pipeline keys a bullet's item metadata by them, so they must be the merge's own."""

from __future__ import annotations

from memorysections import Merge, bullet_key, bullets, merge, title_key

__all__ = ["Merge", "bullet_key", "bullets", "merge", "title_key"]
