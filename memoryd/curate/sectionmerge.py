"""Section merge of MEMORY.md and INSIGHTS.md, as the consolidation pipeline uses it: ``client/memorysections``
(shared with the client's git merge driver). ``bullet_key`` and ``title_key`` are what makes two bullets, two
section titles, the same — the pipeline keys a bullet's item metadata by them, so they must be the merge's own.

``bullets`` is memoized on the text (a few recent texts): one apply asks for the bullets of the same MEMORY.md in
several steps (request bounds, guard, counts), and parsing a 200-section file costs milliseconds each time.
"""

from __future__ import annotations

from functools import lru_cache

import memorysections
from memorysections import Merge, bullet_key, merge, title_key

__all__ = ["Merge", "bullet_key", "bullets", "merge", "title_key"]


@lru_cache(maxsize=8)
def _bullets(text: str) -> tuple[tuple[str, str], ...]:
    return tuple(memorysections.bullets(text))


def bullets(text: str) -> tuple[tuple[str, str], ...]:
    """Every (section title, bullet text) of ``text``, in order ('' is the preamble's title)."""
    return _bullets(text)
