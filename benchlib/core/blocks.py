"""Generated blocks of Markdown files: the text between two HTML-comment markers that a command
writes again (the README's findings, its multi-GPU findings, the settings and support tables)."""
from __future__ import annotations


def replace_block(text: str, body: str, start: str, end: str) -> str:
    """``text`` with the block between the markers replaced by ``body`` (appended when absent)."""
    block = f"{start}\n{body}{end}"
    if start in text and end in text and text.index(start) < text.index(end):
        return text[:text.index(start)] + block + text[text.index(end) + len(end):]
    return text.rstrip("\n") + "\n\n" + block + "\n"
