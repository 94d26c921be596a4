"""Token text made visible: whitespace and control characters become signs a reader can see."""
from __future__ import annotations

import html
from typing import Any

_VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}


def visible(text: str, empty: str = "∅") -> str:
    """`text` with spaces, newlines and tabs as ␣ ↵ ⇥ and other control characters as \\xNN."""
    if text == "":
        return empty
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
    """`text` HTML-escaped and Markdown-escaped, so that Markdown shows it as it is."""
    return "".join("\\" + ch if ch in _MARKDOWN else ch for ch in escape(text))


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
