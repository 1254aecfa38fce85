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
# Every expression here runs in time linear in its line, whatever the line (a cloned file is untrusted input):
# none has two unbounded quantifiers that can both take the same characters.
_REPLACE = re.compile(r"[\[［][ \t]*replace[ \t]*[\]］][ \t]*$", re.IGNORECASE)
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
    """A ``##`` section: its heading line (None for the preamble) and its blocks.

    A parsed section keeps its text and parses it into blocks only when they are asked for: a merge of two large
    files compares most sections as text and never needs their bullets."""

    __slots__ = ("_blocks", "_body", "heading")

    def __init__(self, heading: str | None, blocks: list[Block] | None = None, body: str | None = None) -> None:
        self.heading = heading
        self._blocks = blocks if blocks is not None or body is not None else []
        self._body = body  # the text of the blocks, until they are parsed

    def __repr__(self) -> str:
        return f"Section({self.heading!r}, {len(self.blocks)} blocks)"

    @property
    def blocks(self) -> list[Block]:
        if self._blocks is None:
            self._blocks = _blocks(self._body or "", bom=self.heading is None)
            self._body = None
        return self._blocks

    @blocks.setter
    def blocks(self, blocks: list[Block]) -> None:
        self._blocks = blocks
        self._body = None

    @property
    def parsed(self) -> bool:
        """Its blocks have been read (or were given), rather than kept as text."""
        return self._blocks is not None

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
        """The section's text: its heading and its blocks' lines."""
        body = self._body if self._blocks is None else "".join(line for b in self._blocks for line in b.lines)
        return (self.heading or "") + (body or "")


class Document:
    """A parsed file: the preamble (the lines before the first heading) and the sections in order.

    ``open_at_end`` names what the file leaves open at its end (a code fence's closing line, or ``-->``), ''
    when nothing is: anything appended after it would be swallowed by it. ``eol`` is the line ending of the
    file's first line (``\\n`` when it has none)."""

    __slots__ = ("eol", "open_at_end", "preamble", "sections")

    def __init__(self, preamble: Section, sections: list[Section], open_at_end: str = "", eol: str = "\n") -> None:
        self.preamble = preamble
        self.sections = sections
        self.open_at_end = open_at_end
        self.eol = eol

    def __repr__(self) -> str:
        return f"Document({len(self.preamble.blocks)} preamble blocks, {len(self.sections)} sections)"

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
    unclosed = text.rstrip("#")  # a closing sequence: #s after a space or a tab (or alone)
    if unclosed != text and (not unclosed or unclosed[-1] in " \t"):
        text = unclosed.rstrip(" \t")
    replaced = _REPLACE.search(text, max(0, len(text) - 64))
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
        lines.append(_without_trailing_comments(line))
    key = " ".join(unicodedata.normalize("NFKC", " ".join(lines)).split())
    return key.rstrip(_TERMINAL + " ").translate(_ASCII_LOWER)


def _without_trailing_comments(line: str) -> str:
    """The line without the HTML comments that end it (``a <!-- x --> b <!-- y -->`` → ``a <!-- x --> b``); by
    index, so a line of thousands of comments costs one pass."""
    stop = len(line)
    while True:
        end = stop
        while end > 0 and line[end - 1] in " \t":
            end -= 1
        if not line.endswith("-->", 0, end):
            return line[:stop]
        at = line.rfind("<!--", 0, end - 3)
        if at < 0:
            return line[:stop]
        stop = at


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
    """The blocks of one section's lines (``parse`` has found the headings): the open fence or comment, the
    current bullet, blank lines on hold."""

    def __init__(self) -> None:
        self.out: list[Block] = []
        self.bullet: Block | None = None
        self.held: list[str] = []  # blank lines after a bullet: its own if an indented line follows
        self.fence: tuple[str, int] | None = None
        self.comment = False

    def feed(self, line: str, body: str) -> None:
        if self.fence is not None or self.comment:
            self._opaque(line, body)
        elif body[:2] in _MARKERS:
            self._release()
            self.bullet = Block([line], True)
            self.out.append(self.bullet)
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
            self.out.append(Block([line], False))
            self._open(body)

    def _opaque(self, line: str, body: str) -> None:
        """A line inside a fence or a comment: it goes where the fence or comment began."""
        if self.bullet is not None:
            self.bullet.lines.extend(self.held)
            self.held = []
            self.bullet.lines.append(line)
        else:  # the fence or comment is one block with the line that opened it
            self.out[-1].lines.append(line)
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
            self.out.extend(Block([line], False) for line in self.held)
            self.held = []

    def blocks(self) -> list[Block]:
        self._release()
        return self.out


def _blocks(body: str, bom: bool) -> list[Block]:
    """The blocks of a section's text (its lines after the heading; ``bom``: the file's first lines)."""
    parser = _Parser()
    for i, line in enumerate(_split(body)):
        text = _body(line)
        if i == 0 and bom and text.startswith(BOM):
            text = text[1:]
        parser.feed(line, text)
    return parser.blocks()


def _line_at(text: str, at: int) -> tuple[int, int]:
    """(start, end) of the line holding position ``at`` (end: after its ``\\n``, or the text's end)."""
    end = text.find("\n", at)
    return text.rfind("\n", 0, at) + 1, len(text) if end < 0 else end + 1


def _candidates(text: str) -> list[int]:
    """Where the lines start that can be a heading or open a fence or a comment, found with str.find and one
    regular expression: the rest of a large file is never looked at line by line. (A line that closes a fence or
    a comment is looked for from the line that opened it; a comment opened and closed on its line, as the
    ``<!-- seen: … -->`` markers are, changes nothing.)"""
    starts: set[int] = {0}
    at = text.find("##")
    while at >= 0:  # a "##" with nothing but up to three spaces before it on its line
        start = at
        while start > 0 and text[start - 1] == " " and at - start < 4:
            start -= 1
        if start == 0 or text[start - 1] == "\n":
            starts.add(start)
        end = text.find("\n", at)
        if end < 0:
            break
        at = text.find("##", end)
    for token in ("```", "~~~"):
        at = text.find(token)
        while at >= 0:
            start, end = _line_at(text, at)
            starts.add(start)
            at = text.find(token, end)
    at = text.find("<!--")
    while at >= 0:  # a line whose last comment is left open (one per line looked at, so linear in the text)
        start, end = _line_at(text, at)
        if _comment_opened(text[start:end]):
            starts.add(start)
        at = text.find("<!--", end)
    return sorted(starts)


def _fence_end(text: str, start: int, fence: tuple[str, int]) -> int | None:
    """Where the line after the fence's closing line starts (the fence opened on the line before ``start``);
    None when it never closes."""
    run = fence[0] * fence[1]
    at = text.find(run, start)
    while at >= 0:
        line_start, line_end = _line_at(text, at)
        if _fence_closed(_body(text[line_start:line_end]), fence):
            return line_end
        at = text.find(run, line_end)
    return None


def _comment_end(text: str, start: int) -> int | None:
    """Where the line after the comment's closing line starts (the comment opened before ``start``); None when
    it never closes."""
    at = text.find("-->", start)
    while at >= 0:
        line_end = _line_at(text, at)[1]
        if not _comment_opened(_body(text[at + 3 : line_end])):
            return line_end
        at = text.find("-->", line_end)
    return None


def parse(text: str) -> Document:
    """The document of ``text`` (any text: ``render`` gives it back exactly)."""
    headings: list[tuple[int, int]] = []  # (start, end) of each heading line
    open_at_end = ""
    resume = 0  # candidates before this are inside a fence or comment
    for start in _candidates(text):
        if start < resume:
            continue
        end = text.find("\n", start)
        end = len(text) if end < 0 else end + 1
        body = _body(text[start:end])
        if start == 0:
            body = body.removeprefix(BOM)
        if body[:1] in ("#", " ") and _HEADING.match(body):
            headings.append((start, end))
            continue
        # what the line-by-line parser does with a line that is not a heading (see _Parser._open)
        content = body[2:] if body[:2] in _MARKERS else body
        fence = _fence_opened(content) if "`" in content or "~" in content else None
        closed: int | None = end
        if fence is not None:
            closed = _fence_end(text, end, fence)
            open_at_end = fence[0] * fence[1]
        elif "<!--" in content and _comment_opened(content):
            closed = _comment_end(text, end)
            open_at_end = "-->"
        if closed is None:
            break
        resume = closed
        open_at_end = ""
    first = headings[0][0] if headings else len(text)
    preamble = Section(None, body=text[:first])
    sections = []
    for i, (start, end) in enumerate(headings):
        stop = headings[i + 1][0] if i + 1 < len(headings) else len(text)
        sections.append(Section(text[start:end], body=text[end:stop]))
    newline = text.find("\n")
    eol = "\r\n" if newline > 0 and text[newline - 1] == "\r" else "\n"
    return Document(preamble, sections, open_at_end, eol)


def render(doc: Document) -> str:
    """The text of a document: every line as it was parsed (or as a merge put it); a section whose blocks were
    never read is its text as it was."""
    out: list[str] = []
    for section in doc.all_sections():
        if not section.parsed:
            out.append(section.raw)
            continue
        if section.heading is not None:
            out.append(section.heading)
        for block in section.blocks:
            out.extend(block.lines)
    return "".join(out)


def bullets(text: str) -> list[tuple[str, str]]:
    """Every bullet of a file as (section title, bullet text), in order ('' is the preamble's title)."""
    doc = parse(text)
    return [(section.title, b.text) for section in doc.all_sections() for b in section.blocks if b.bullet]
