"""Summarise a vLLM log: version, model, memory figures, whether start-up completed, and why it failed."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from typing import IO, Any

from sparktui.core.vllm_log import LogSummary

# Reading is bounded, so a pipe that never ends (`yes |`) or a device (/dev/urandom) cannot keep it
# busy for ever: a real start-up log is a few thousand lines; a server that logged every request for
# weeks reaches a few hundred MiB.
MAX_BYTES = 256 << 20
MAX_LINES = 4_000_000
MAX_LINE_BYTES = 1 << 20  # a "line" longer than this is cut (no newline in sight: not a log)
SNIFF_BYTES = 64 << 10


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a vLLM log file (what `vllm serve` printed), or - for standard input")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


class _Reader:
    """The lines of a binary stream, decoded as UTF-8 (bad bytes replaced), within the bounds above."""

    def __init__(self, stream: IO[bytes], head: bytes) -> None:
        self.stream = stream
        self.head = head
        self.cut: str | None = None  # why reading stopped before the end, if it did

    def _chunks(self) -> Iterator[bytes]:
        total = len(self.head)
        yield self.head
        while total < MAX_BYTES:
            chunk = self.stream.read(min(1 << 20, MAX_BYTES - total))
            if not chunk:
                return
            total += len(chunk)
            yield chunk
        if self.stream.read(1):
            self.cut = f"read only the first {MAX_BYTES >> 20} MiB"

    def lines(self) -> Iterator[str]:
        # split on b"\n" only: a progress bar's carriage returns stay inside its line, as vLLM wrote it
        pending = b""
        count = 0
        for chunk in self._chunks():
            parts = (pending + chunk).split(b"\n")
            pending = parts.pop()
            if len(pending) > MAX_LINE_BYTES:
                parts.append(pending[:MAX_LINE_BYTES])
                pending = b""
            for part in parts:
                count += 1
                if count > MAX_LINES:
                    self.cut = f"read only the first {MAX_LINES:,} lines"
                    return
                yield part.decode("utf-8", "replace") + "\n"
        if pending:
            yield pending.decode("utf-8", "replace")


def binary_reason(head: bytes) -> str | None:
    """Why these first bytes are not a text log, or None when they look like text."""
    nul = head.find(b"\0")
    if nul >= 0:
        return f"a NUL byte at offset {nul}"
    text = head.decode("utf-8", "replace")
    # what a terminal log can hold: text, tabs, newlines, carriage returns, ANSI escapes, backspaces
    odd = sum(1 for ch in text if ch == "\ufffd" or (ch < " " and ch not in "\t\n\r\x1b\x08\x0c"))
    if text and odd > len(text) // 10:
        return f"{odd} of its first {len(text)} characters are not text"
    return None


def open_log(path: str, what: str) -> IO[bytes]:
    """The log file opened for reading. A named pipe is refused before it is opened: with nothing writing
    to it, opening it would wait for ever."""
    import stat

    from sparktui.errors import UserError

    try:
        fifo = stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        fifo = False  # open() says why
    if fifo:
        raise UserError(
            f"{what}: {path!r} is a named pipe, not a log file: give the file vLLM's output went to, or pipe "
            "the log in (… | sparktui inspect-log -)"
        )
    try:
        return open(path, "rb")
    except OSError as exc:
        raise UserError(
            f"{what}: cannot read {path!r}: {exc.strerror or exc}; give the path of a vLLM log file"
        ) from None


def read_log_text(path: str, flag: str) -> str:
    """The text of the log file a flag names, read within the same bounds as inspect-log reads (a
    device or an endless file cannot keep it busy) and refused when it is not text."""
    from sparktui.errors import UserError

    try:
        with open_log(path, flag) as stream:
            head = stream.read(SNIFF_BYTES)
            why = binary_reason(head) if head else None
            if why is not None:
                raise UserError(
                    f"{flag}: {path!r} is not a text log ({why}); give the file vLLM's output (stdout and stderr) went to"
                )
            reader = _Reader(stream, head)
            text = "".join(reader.lines())
    except OSError as exc:
        raise UserError(
            f"{flag}: cannot read {path}: {exc.strerror or exc}; give the path of a vLLM log file"
        ) from None
    if reader.cut:
        print(f"sparktui: {flag}: {reader.cut} of {path}", file=sys.stderr)
    return text


def _read_summary(path: str) -> tuple[LogSummary, str | None]:
    from sparktui.core.vllm_log import summarize
    from sparktui.errors import UserError

    name = "standard input" if path == "-" else repr(path)
    if path == "-" and sys.stdin is None:  # started with fd 0 closed
        raise UserError(
            "inspect-log -: standard input is closed; pipe the log in (… | sparktui inspect-log -) or give a file"
        )
    stream: IO[bytes] = sys.stdin.buffer if path == "-" else open_log(path, "inspect-log")
    try:
        try:
            head = stream.read(SNIFF_BYTES)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise UserError(f"cannot read log file {path!r}: {reason}; give the path of a vLLM log file") from None
        if not head:
            raise UserError(
                f"{name} is empty: there is no vLLM output to summarise; give the file vLLM's output went to"
            )
        why = binary_reason(head)
        if why is not None:
            raise UserError(
                f"{name} is not a text log ({why}); give the file vLLM's output (stdout and stderr) went to"
            )
        reader = _Reader(stream, head)
        summary = summarize(reader.lines())
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    if summary.text_lines == 0:
        raise UserError(f"{name} holds only blank lines: there is no vLLM output to summarise")
    if summary.events == 0 and not _has_vllm_line(head):
        raise UserError(
            f"{name} is not a vLLM log: none of its lines is in vLLM's format ('INFO 05-12 02:45:35 [file.py:1] …', "
            "'(EngineCore_DP0 pid=N) …') and none says anything vLLM says; give the file vLLM's output "
            "(stdout and stderr) went to"
        )
    return summary, reader.cut


def _has_vllm_line(head: bytes) -> bool:
    from sparktui.core.vllm_lines import is_vllm_line

    return any(is_vllm_line(line) for line in head.decode("utf-8", "replace").splitlines()[:2000])


def _unreadable(shown: str) -> str:
    return f"not read: the log says {shown!r}, a number no vLLM prints"


def unreadable_figures(summary: LogSummary) -> dict[str, str]:
    """The figures the log has in a form no vLLM prints ("1.2.3", 400 digits), by summary field, as
    --json gives them (only when there are any)."""
    return {field: _unreadable(text) for field, text in summary.unreadable.items()}


def _format(summary: LogSummary) -> str:
    d = summary.to_dict()

    def show(value: Any, unit: str = "", field: str = "") -> str:
        if value is None and field in summary.unreadable:
            return _unreadable(summary.unreadable[field])
        return "-" if value is None else f"{value}{unit}"

    tokens = d["kv_cache_tokens"]
    rows = [
        ("version", show(d["version"])),
        ("model", show(d["model"])),
        ("max model len", show(d["max_model_len"] and f"{d['max_model_len']:,}", field="max_model_len")),
        ("weights", show(d["weights_gib"], " GiB", "weights_gib")),
        ("KV cache memory", show(d["available_kv_gib"], " GiB", "available_kv_gib")),
        (
            "KV cache size",
            show(None if tokens is None else f"{tokens:,} tokens ({summary.kv_cache_device})", field="kv_cache_tokens"),
        ),
        ("max concurrency", show(d["max_concurrency"], "x", "max_concurrency")),
        ("ready", "yes" if d["ready"] else "no"),
        ("phase", summary.phase if summary.phase != "failed" else f"failed during {summary.reached.replace('_', ' ')}"),
    ]
    lines = [f"{name:<16} {value}" for name, value in rows]
    if summary.launches > 1:
        lines.append(f"{'launches':<16} {summary.launches} in this file: the figures are of the last")
    failure = d["failure"]
    lines.append(f"{'failure':<16} {'-' if failure is None else failure['kind']}")
    if failure:
        lines.append(f"{'':<16} {failure['message']}")
        lines.append(f"{'fix':<16} {failure['hint']}")
    return "\n".join(lines)


def _json(summary: LogSummary) -> dict[str, Any]:
    """What the text shows, as JSON: the summary's fields plus the phase (with the furthest start-up phase
    reached, which "failed during …" names) and how many launches the file holds."""
    unreadable = unreadable_figures(summary)
    return {
        **summary.to_dict(),
        "phase": summary.phase,
        "reached": summary.reached,
        "launches": summary.launches,
        **({"unreadable": unreadable} if unreadable else {}),
    }


def run(args: argparse.Namespace) -> int:
    summary, cut = _read_summary(args.file)
    if cut:
        print(f"sparktui: {cut} of {args.file}; the summary covers those", file=sys.stderr)
    if args.json:
        print(json.dumps(_json(summary), indent=2))
    else:
        print(_format(summary))
    return 0
