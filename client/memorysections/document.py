"""A Markdown memory file as a document of ``##`` sections made of ``- `` bullets, parsed so that rendering it gives
back every byte (``render(parse(text)) == text`` for any text: CRLF, no final newline, a BOM, code fences,
HTML comments, other heading levels, prose — all kept as they were).

The model, line by line (lines split at ``\\n`` only; a line keeps its ending, ``\\r\\n`` included):

* a **heading** is a line ``## Title`` (up to three spaces before it, then ``##`` and a space, a tab or the end
  of the line; ``#`` and ``###`` are not section headings; a heading ends a bullet even when indented under it);
  the lines before the first heading are the **preamble**, a section without a heading;
* a **bullet** starts with ``- `` (also ``* `` or ``+ ``) at the start of a line and goes on over the lines
  indented under it; blank lines belong to it when an indented line follows them;
* every other line is a **line** of its section, kept as it is;
* nothing inside a code fence (```` ``` ```` or ``~~~``) or an HTML comment (``<!-- … -->``) is a heading or a
  bullet of its own: a fence or comment belongs, to its end, to the bullet it opens in, or else is one block
  with the line that opens it (a merge moves it whole, never puts a bullet inside it).

Standard library only: the daemon (``memoryd.curate``) and the client's git merge driver (``memoryctl
merge-file``) both import it.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = [
    "Block",
    "Document",
    "Section",
    "bullet_key",
    "bullets",
    "parse",
    "render",
    "title_key",
]

_HEADING = re.compile(r" {0,3}##(?:[ \t]|$)")
_CLOSING = re.compile(r"(?:^|[ \t]+)#+[ \t]*$")
_REPLACE = re.compile(r"[ \t]*[\[［][ \t]*replace[ \t]*[\]］][ \t]*$", re.IGNORECASE)
_TRAILING_COMMENT = re.compile(r"[ \t]*<!--.*?-->[ \t]*$")
SEEN = re.compile(r"<!--[ \t]*seen:[ \t]*(\d{4}-\d{2}-\d{2})[ \t]*-->")
_FENCE_ONLY = re.compile(r"[ \t]*(?:`{3,}|~{3,})[ \t]*$")
_MARKERS = frozenset({"- ", "-\t", "* ", "*\t", "+ ", "+\t"})
# What ends a sentence (after NFKC: full-width ，；：！？ are their ASCII forms by then).
_TERMINAL = ".,;:!?。、…｡"
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
BOM = "\ufeff"


class Block:
    """A bullet (its first line and the lines under it) or one other line (with the lines of a fence or comment it
    opens), as raw lines with their endings."""

    __slots__ = ("_key", "bullet", "lines")

    def __init__(self, lines: list[str], bullet: bool) -> None:
        self.lines = lines
        self.bullet = bullet
        self._key: str | None = None

    def __repr__(self) -> str:
        return f"Block({self.lines!r}, bullet={self.bullet})"

    @property
    def raw(self) -> str:
        return "".join(self.lines)

    @property
    def text(self) -> str:
        """A bullet's text: its marker dropped, its lines without their endings joined by ``\\n`` (continuation
        lines keep their indentation, a trailing ``<!-- seen: … -->`` stays); another line's text without its
        ending."""
        first = _body(self.lines[0]).removeprefix(BOM)
        if self.bullet:
            first = first[2:]
        return "\n".join([first, *(_body(line) for line in self.lines[1:])]).rstrip("\n")

    @property
    def key(self) -> str:
        """What makes two bullets the same (``bullet_key`` of the text); other lines' key is their text."""
        if self._key is None:
            self._key = bullet_key(self.text) if self.bullet else "\n".join(_body(line) for line in self.lines)
        return self._key

    @property
    def seen(self) -> str | None:
        """The date of the last ``<!-- seen: YYYY-MM-DD -->`` marker in the bullet, if any."""
        found = SEEN.findall(self.raw)
        return found[-1] if found else None


class Section:
    """A ``##`` section: its heading line (None for the preamble) and its blocks."""

    __slots__ = ("_raw", "blocks", "heading")

    def __init__(self, heading: str | None, blocks: list[Block] | None = None) -> None:
        self.heading = heading
        self.blocks: list[Block] = [] if blocks is None else blocks
        self._raw: str | None = None

    def __repr__(self) -> str:
        return f"Section({self.heading!r}, {len(self.blocks)} blocks)"

    @property
    def title(self) -> str:
        """The heading's text: ``##``, a closing ``#`` sequence and a ``[replace]`` mark left out ('' for the
        preamble)."""
        return split_title(self.heading)[0] if self.heading is not None else ""

    @property
    def replace(self) -> bool:
        """The heading ends with ``[replace]`` (an update that replaces this section's bullets)."""
        return self.heading is not None and split_title(self.heading)[1]

    @property
    def key(self) -> str | None:
        """``title_key`` of the title; None for the preamble."""
        return None if self.heading is None else title_key(self.title)

    @property
    def bullets(self) -> list[Block]:
        return [b for b in self.blocks if b.bullet]

    @property
    def raw(self) -> str:
        """The section's text (computed once: a section is not changed after its raw text was asked for)."""
        if self._raw is None:
            self._raw = (self.heading or "") + "".join(line for b in self.blocks for line in b.lines)
        return self._raw


class Document:
    """A parsed file: the preamble (the lines before the first heading) and the sections in order.

    ``open_at_end`` names what the file leaves open at its end (a code fence's closing line, or ``-->``), ''
    when nothing is: anything appended after it would be swallowed by it."""

    __slots__ = ("open_at_end", "preamble", "sections")

    def __init__(self, preamble: Section, sections: list[Section], open_at_end: str = "") -> None:
        self.preamble = preamble
        self.sections = sections
        self.open_at_end = open_at_end

    def __repr__(self) -> str:
        return f"Document({len(self.preamble.blocks)} preamble blocks, {len(self.sections)} sections)"

    @property
    def eol(self) -> str:
        """The line ending the file uses: that of its first line (``\\n`` when it has none)."""
        for section in (self.preamble, *self.sections):
            lines = ([section.heading] if section.heading is not None else []) + [
                line for b in section.blocks for line in b.lines
            ]
            for line in lines:
                if line.endswith("\n"):
                    return "\r\n" if line.endswith("\r\n") else "\n"
        return "\n"

    def all_sections(self) -> list[Section]:
        return [self.preamble, *self.sections]


def _body(line: str) -> str:
    """A line without its ending."""
    if line.endswith("\n"):
        line = line[:-1]
    return line[:-1] if line.endswith("\r") else line


def split_title(heading: str) -> tuple[str, bool]:
    """A heading line's title and whether it carries the ``[replace]`` mark."""
    text = _body(heading).removeprefix(BOM).lstrip(" ")[2:].strip(" \t")
    text = _CLOSING.sub("", text)
    replaced = _REPLACE.search(text)
    if replaced:
        text = text[: replaced.start()]
    return text.strip(" \t"), replaced is not None


def title_key(title: str) -> str:
    """What makes two section titles the same: full-width and half-width forms (NFKC), case and white space are
    ignored, and so is punctuation at the end (``## User preferences:`` is ``## ＵＳＥＲ  Preferences``)."""
    key = "".join(unicodedata.normalize("NFKC", title).casefold().split())
    return key.rstrip(_TERMINAL)


def bullet_key(text: str) -> str:
    """What makes two bullets the same: HTML comments at the end of a line (the ``<!-- seen: … -->`` marker
    among them) and lines that are only a code fence's ```` ``` ```` are left out, full-width forms become half-width (NFKC), runs of white space one space, sentence
    punctuation at the end is dropped and ASCII letters lower-cased (other scripts' case is kept)."""
    lines = []
    for line in text.split("\n"):
        if _FENCE_ONLY.match(line):
            continue
        while "<!--" in line:
            stripped = _TRAILING_COMMENT.sub("", line)
            if stripped == line:
                break
            line = stripped
        lines.append(line)
    key = " ".join(unicodedata.normalize("NFKC", " ".join(lines)).split())
    while key and key[-1] in _TERMINAL:
        key = key[:-1].rstrip()
    return key.translate(_ASCII_LOWER)


def _split(text: str) -> list[str]:
    """Lines with their endings, split at ``\\n`` only (a lone ``\\r`` or U+2028 stays inside its line)."""
    if not text:
        return []
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _fence_opened(content: str) -> tuple[str, int] | None:
    """The fence a line opens (its character and length), if it opens one."""
    s = content.lstrip(" \t")
    if not (s.startswith("```") or s.startswith("~~~")):
        return None
    char = s[0]
    n = len(s) - len(s.lstrip(char))
    if char == "`" and "`" in s[n:]:
        return None  # ```x``` is inline code, not a fence
    return char, n


def _fence_closed(content: str, fence: tuple[str, int]) -> bool:
    s = content.strip(" \t")
    return len(s) >= fence[1] and not s.strip(fence[0])


def _comment_opened(content: str) -> bool:
    """The line leaves an HTML comment open (its last ``<!--`` has no ``-->`` after it)."""
    at = content.rfind("<!--")
    return at >= 0 and "-->" not in content[at + 4 :]


class _Parser:
    """The line-by-line state: open fence or comment, the current section and bullet, blank lines on hold."""

    def __init__(self) -> None:
        self.preamble = Section(None)
        self.sections: list[Section] = []
        self.section = self.preamble
        self.bullet: Block | None = None
        self.held: list[str] = []  # blank lines after a bullet: its own if an indented line follows
        self.fence: tuple[str, int] | None = None
        self.comment = False

    def feed(self, line: str, body: str) -> None:
        if self.fence is not None or self.comment:
            self._opaque(line, body)
        elif body[:1] in ("#", " ") and _HEADING.match(body):
            self._release()
            self.bullet = None
            self.section = Section(line)
            self.sections.append(self.section)
        elif body[:2] in _MARKERS:
            self._release()
            self.bullet = Block([line], True)
            self.section.blocks.append(self.bullet)
            self._open(body[2:])
        elif self.bullet is not None and not body.strip():
            self.held.append(line)
        elif self.bullet is not None and body[0] in " \t":
            self.bullet.lines.extend(self.held)
            self.held = []
            self.bullet.lines.append(line)
            self._open(body)
        else:
            self._release()
            self.bullet = None
            self.section.blocks.append(Block([line], False))
            self._open(body)

    def _opaque(self, line: str, body: str) -> None:
        """A line inside a fence or a comment: it goes where the fence or comment began."""
        if self.bullet is not None:
            self.bullet.lines.extend(self.held)
            self.held = []
            self.bullet.lines.append(line)
        else:  # the fence or comment is one block with the line that opened it
            self.section.blocks[-1].lines.append(line)
        if self.fence is not None:
            if _fence_closed(body, self.fence):
                self.fence = None
        elif "-->" in body:
            self.comment = _comment_opened(body[body.index("-->") + 3 :])

    def _open(self, content: str) -> None:
        if "`" in content or "~" in content:
            self.fence = _fence_opened(content)
        if self.fence is None and "<!--" in content:
            self.comment = _comment_opened(content)

    def _release(self) -> None:
        """Blank lines held after a bullet become lines of the section."""
        if self.held:
            self.section.blocks.extend(Block([line], False) for line in self.held)
            self.held = []

    def document(self) -> Document:
        self._release()
        open_at_end = ""
        if self.fence is not None:
            open_at_end = self.fence[0] * self.fence[1]
        elif self.comment:
            open_at_end = "-->"
        return Document(self.preamble, self.sections, open_at_end)


def parse(text: str) -> Document:
    """The document of ``text`` (any text: ``render`` gives it back exactly)."""
    parser = _Parser()
    for i, line in enumerate(_split(text)):
        body = _body(line)
        if i == 0 and body.startswith(BOM):
            body = body[1:]
        parser.feed(line, body)
    return parser.document()


def render(doc: Document) -> str:
    """The text of a document: every line as it was parsed (or as a merge put it)."""
    out: list[str] = []
    for section in doc.all_sections():
        if section.heading is not None:
            out.append(section.heading)
        for block in section.blocks:
            out.extend(block.lines)
    return "".join(out)


def bullets(text: str) -> list[tuple[str, str]]:
    """Every bullet of a file as (section title, bullet text), in order ('' is the preamble's title)."""
    doc = parse(text)
    return [(section.title, b.text) for section in doc.all_sections() for b in section.blocks if b.bullet]
