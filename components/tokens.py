"""Token text made visible: whitespace and control characters become signs a reader can see."""
from __future__ import annotations

import html
import unicodedata
from typing import Any

_VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}
# Explicit bidirectional controls (embeddings, overrides, isolates): in text from a file or a visitor each shows as
# its code point, so that none can reorder the page's own words around it (a right-to-left override would).
_BIDI = frozenset(map(chr, [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]))
# Combining marks kept on one character: as many as a script stacks (Vietnamese two, pointed Hebrew up to four),
# too few to climb out of a line onto the page's buttons.
MAX_MARKS = 4


def tamed(text: str) -> str:
    """Text from a file or a visitor with its bidirectional controls shown as code points (⟨U+202E⟩) and at most
    MAX_MARKS combining marks on a character."""
    out, marks = [], 0
    for ch in text:
        marks = marks + 1 if unicodedata.combining(ch) or unicodedata.category(ch) == "Me" else 0
        if ch in _BIDI:
            out.append(f"⟨U+{ord(ch):04X}⟩")
        elif marks <= MAX_MARKS:
            out.append(ch)
    return "".join(out)


def isolated(text: str) -> str:
    """Text from a file or a visitor as the page's own sentences quote it: tamed, and set in an isolate of its own
    (U+2068 ... U+2069, what <bdi> does in HTML), so that right-to-left text inside it moves none of the words and
    punctuation around it. Plain text: the caller escapes it."""
    return f"\u2068{tamed(text)}\u2069"


def visible(text: str, empty: str = "∅") -> str:
    """`text` tamed, with spaces, newlines and tabs as ␣ ↵ ⇥ and other control characters as \\xNN."""
    if text == "":
        return empty
    text = tamed(text)
    out = []
    for ch in text:
        if ch in _VISIBLE:
            out.append(_VISIBLE[ch])
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)


# Markdown's punctuation that can start formatting or a link; a backslash makes each literal (CommonMark).
# '&' and ';' stay as they are: they spell the entities escape() writes.
_MARKDOWN = set("\\`*_{}[]()#+-.!|~")


def quoted(text: str) -> str:
    """A token as it appears in narration: visible whitespace inside quotes, HTML-escaped and Markdown-escaped,
    since the narration is Markdown and a token (from a loaded file, say) may read "<img onerror=...>" or
    "[x](javascript:...)" or just "**"."""
    return f"'{markdown_literal(visible(text))}'"


def markdown_literal(text: str) -> str:
    """`text` HTML-escaped and Markdown-escaped, so that Markdown shows it as it is. Quotes stay as they are: text is no
    attribute, and Gradio's Markdown would show their entities (&#x27;) as written."""
    return "".join("\\" + ch if ch in _MARKDOWN else ch for ch in html.escape(text, quote=False))


def escape(text: str) -> str:
    return html.escape(text, quote=True)


def excerpt(value: Any, limit: int = 60) -> str:
    """A value as a message may quote it: repr, so that its type shows, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def plot_text(text: str) -> str:
    """`text` for a plotly label or hover text: plotly draws a subset of HTML there (<b>, <br>, ...) and
    decodes &lt; &gt; &amp; but not &quot;, so quotes are left as they are."""
    return html.escape(text, quote=False)
