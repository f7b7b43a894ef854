"""Text from records and replies made safe to print: a state file or a supervisor's reply is data
another process wrote, and an ESC or a carriage return in it must not reach the terminal as one."""

from __future__ import annotations

import unicodedata


def printable(text: object, *, keep_newlines: bool = False) -> str:
    """`text` with every control or format character (C0, DEL, C1, bidi overrides…) written as a
    visible escape (`\\x1b`, `\\u202e`); tabs and newlines included, so one field stays one line,
    unless `keep_newlines` (a message of several lines of its own)."""
    out = []
    for ch in str(text):
        if keep_newlines and ch == "\n":
            out.append(ch)
        elif unicodedata.category(ch) in ("Cc", "Cf"):
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)
