"""Hypothesis strategies for Markdown memory files: texts made of the lines that matter to the section parser
(headings of every level, bullets, continuation lines, code fences, HTML comments, seen markers, blank lines,
Chinese, a BOM, CRLF, no final newline), and structured documents of sections and bullets."""

from __future__ import annotations

from hypothesis import strategies as st

TITLES = ["Prefs", "prefs", "Ｐｒｅｆｓ", "Project", "项目 约定", "项目约定", "Tools", "Open Questions", ""]
WORDS = ["use pnpm", "Use pnpm.", "串口超时改为重试三次", "KX-200 baud 115200", "tabs", "中文回答", "x", "ERR_0x3F"]

LINES = st.one_of(
    st.sampled_from(
        [
            "",
            " ",
            "# Memory",
            "### sub heading",
            "## ",
            "##",
            "   ## indented heading",
            "    ## four spaces",
            "-",
            "- ",
            "* star bullet",
            "+ plus bullet",
            "  continuation",
            "\tcontinuation with a tab",
            "  - nested",
            "```",
            "```python",
            "  ```",
            "~~~",
            "````",
            "```x```",
            "<!-- a comment",
            "-->",
            "<!-- one line -->",
            "text <!-- open",
            "plain prose line",
            "---",
            "\r",
            "line with \u2028 separator",
            "- bullet <!-- seen: 2026-01-05 -->",
            "- bullet <!-- seen: 2025-12-31 -->",
            "- 中文要点。",
        ]
    ),
    st.builds(lambda t: f"## {t}", st.sampled_from([*TITLES, "A [replace]", "prefs [REPLACE]", "Tools ##"])),
    st.builds(lambda w: f"- {w}", st.sampled_from(WORDS)),
    st.text(max_size=12),
)


@st.composite
def markdown(draw: st.DrawFn, max_lines: int = 25) -> str:
    """A text made of parser-relevant lines, with LF or CRLF endings (or a mix), maybe no final newline."""
    lines = draw(st.lists(LINES, max_size=max_lines))
    eol = draw(st.sampled_from(["\n", "\r\n", "mixed"]))
    out = []
    for line in lines:
        out.append(line + (draw(st.sampled_from(["\n", "\r\n"])) if eol == "mixed" else eol))
    text = "".join(out)
    if draw(st.booleans()):
        text = text.rstrip("\r\n")
    if draw(st.integers(0, 5)) == 0:  # a byte order mark starts a file, never a line inside it
        text = "\ufeff" + text
    return text


BULLETS = st.sampled_from(
    [
        *WORDS,
        "多行要点\n  第二行",
        "with marker <!-- seen: 2026-02-01 -->",
        "with marker <!-- seen: 2026-03-01 -->",
        "code\n  ```\n  ## not a heading\n  - not a bullet\n  ```",
        "alpha",
        "beta",
        "gamma",
        "delta",
        "epsilon",
    ]
)


@st.composite
def documents(draw: st.DrawFn) -> list[tuple[str, list[str]]]:
    """A structured memory file: distinct section titles, each with bullets (texts without the marker)."""
    titles = draw(st.lists(st.sampled_from(["A", "B", "C", "D", "E", "决策", "Notes"]), unique=True, max_size=5))
    return [(t, draw(st.lists(BULLETS, max_size=5))) for t in titles]


def write(doc: list[tuple[str, list[str]]], preamble: str = "# Memory\n\n") -> str:
    parts = [preamble]
    for title, items in doc:
        parts.append(f"## {title}\n" + "".join(f"- {item}\n" for item in items) + "\n")
    return "".join(parts)
