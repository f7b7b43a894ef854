"""The anatomy of one line of vLLM output: colours, carriage-return redraws, the outer prefixes other
tools add (timestamps, `docker compose logs`, journald), vLLM's own `(EngineCore_DP0 pid=…)`
prefix, the level and the message. Pure, and on the hot path of log ingest (str operations first,
a regular expression only where it must)."""

from __future__ import annotations

import re

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")  # colour codes
_PREFIX = re.compile(r"\(([A-Za-z][\w.-]*) pid=\d+\) ?")
_LEVELS = ("INFO", "WARNING", "ERROR", "DEBUG", "CRITICAL")
EXCEPTION = re.compile(r"((?:[A-Za-z_][\w.]*)?(?:Error|Exception|Interrupt)): (.*)")
# Prefixes that tools outside vLLM put before its text, possibly several (compose name, then a time).
_OUTER_PREFIX = re.compile(
    r"(?:"
    # "2026-04-19 17:30:52.611 | " (loguru-style) and docker logs -t's "2026-04-19T17:30:52.611Z "
    r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?(?: *\|(?: |$)| )"
    # CI runners' "[2025-12-13T19:54:35Z] "
    r"|\[\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\] "
    # a log quoted as Markdown ("> (EngineCore pid=1) INFO …", a GitHub issue's source)
    r"|> "
    # SLURM's `srun --label`: the task number, "0: "
    r"|\d{1,5}: "
    # docker compose logs: "vllm-1  | ", "vllm_1 |"
    r"|[A-Za-z0-9][\w.-]*\s*\|(?: |$)"
    # journald / syslog: "Apr 19 17:30:52 spark vllm[1234]: "
    r"|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ [^\s:\[]+(?:\[\d+\])?: "
    r")+"
)
# "…| 3/51 [00:01<00:24,  1.95it/s](EngineCore pid=1) INFO …": a tqdm frame has no newline, so a line another
# process writes meanwhile continues it (and "^C(EngineCore pid=1) INFO …" after Ctrl-C in a terminal)
_GLUED = re.compile(r"(?:\]|\^C)(\([A-Za-z][\w.-]* pid=\d+)")
_MONTH_INITIALS = frozenset("JFMASOND")
_MONTHS = frozenset(("Jan ", "Feb ", "Mar ", "Apr ", "May ", "Jun ", "Jul ", "Aug ", "Sep ", "Oct ", "Nov ", "Dec "))


def clean(raw: str) -> str:
    """The line as a terminal would show it: no colours, no newline, progress bars at their last frame."""
    line = raw.rstrip("\r\n")
    if "\x1b" in line:
        # the usual case is a coloured "(APIServer pid=…)" prefix: cut it with str ops, regex the rest
        if line.startswith("\x1b["):
            end = line.find("m", 2, 16)
            if end > 0 and line[2:end].replace(";", "").isdigit():
                line = line[end + 1 :]
        line = line.replace("\x1b[0;0m", "").replace("\x1b[0m", "")
        if "\x1b" in line:
            line = ANSI.sub("", line)
    first = line[:1]  # one-character strings are cached: no allocation
    if first == " " or first == "\t":  # a log pasted indented (a notebook's output, a quote in a report)
        line = line.lstrip()
        first = line[:1]
    # cheap tests first: vLLM's own lines start with "(", a level or a letter, with no "| " near the start
    if first != "(" and (
        first.isdigit()
        or first == ">"
        or (first == "[" and line[1:2].isdigit())
        or line.find("| ", 0, 100) >= 0
        or line.endswith("|")
        or (first in _MONTH_INITIALS and line[:4] in _MONTHS)
    ):
        m = _OUTER_PREFIX.match(line)
        if m:
            line = line[m.end() :]
    if "\r" in line:
        # a progress bar redrawn in place: keep the prefix and what the terminal showed last
        parts = line.split("\r")
        shown = next((part for part in reversed(parts[1:]) if part.strip()), "")
        head = _PREFIX.match(parts[0])
        line = parts[0] + shown if head and head.end() >= len(parts[0].rstrip()) else shown or parts[0]
    if line[:1] != "(" and "pid=" in line and (m := _GLUED.search(line)):
        line = line[m.start(1) :]  # another process's line written after a bar's frame or a typed ^C
    return line


def process_end(line: str) -> int:
    """Index just past a "(EngineCore_DP0 pid=123)" prefix, or 0. A Ray worker's line has two, the
    engine's and its own ("(EngineCore pid=1) (RayWorkerWrapper pid=2, ip=10.0.0.2) INFO …"): past both."""
    end = start = 0
    while line.startswith("(", start):
        close = line.find(")", start + 1, start + 80)
        if close < 0 or line.find(" pid=", start + 1, close) < 0:
            break
        end = close + 1
        start = end + 1 if line.startswith(" (", end) else end
    return end


def level_and_message(line: str) -> tuple[str | None, str]:
    level = None
    # "INFO 05-12 02:45:10 [api_server.py:1043] msg" and uvicorn's "INFO:     msg"
    if line.startswith(_LEVELS):
        word, _, rest = line.partition(" ")
        if word.endswith(":") and word[:-1] in _LEVELS:
            level, line = word[:-1], rest
        elif word in _LEVELS and rest[:1].isdigit():
            cut = rest.find("] ", 0, 80)
            if cut > 0:
                level, line = word, rest[cut + 2 :]
            elif rest.endswith("]"):
                level, line = word, ""
    return level, line.strip()


# A line `level_and_message` reads at INFO, WARNING or DEBUG after `process_end`'s prefix (`clean`
# leaves such a line as it is): "(P pid=N)", blanks, then "LEVEL D… [file:line] " within 80
# characters, "LEVEL D…]" at the end, or uvicorn's "LEVEL:" and a space or the end.
_QUIET_LEVEL = r"(?:(?:INFO|WARNING|DEBUG) (?:\d.{0,77}\] |\d.*\]\Z)|(?:INFO|WARNING|DEBUG):(?: |\Z))"
_QUIET = re.compile(r"\((?=[^)]* pid=)[^)]{0,78}\)\s*" + _QUIET_LEVEL)
_QUIET_BARE = re.compile(_QUIET_LEVEL)  # no process prefix (one process): no blanks before the level


def quiet(raw: str) -> bool:
    """True when `raw` is a line of vLLM's own at INFO, WARNING or DEBUG level, as `clean`,
    `process_end` and `level_and_message` would read it: such a line holds no failure and no
    exception (`core.vllm_log.parse_line`). False for anything else, or when unsure: the caller
    parses it. One match, a fraction of a parse (a log flood's lines are almost all so)."""
    if raw.startswith("\x1b["):  # vLLM's coloured process prefix, cut as `clean` cuts it
        end = raw.find("m", 2, 16)
        if end < 0 or not raw[2:end].replace(";", "").isdigit():
            return False
        raw = raw[end + 1 :]
        if "\x1b" in raw:
            raw = raw.replace("\x1b[0;0m", "").replace("\x1b[0m", "")
    if "\x1b" in raw or "\r" in raw or "\n" in raw:
        return False
    if raw[:1] == "(":
        return _QUIET.match(raw) is not None
    # no process prefix: `clean` would look for another tool's prefix ("vllm-1  | ") in such a line
    return raw.find("| ", 0, 100) < 0 and not raw.endswith("|") and _QUIET_BARE.match(raw) is not None


def message_start(line: str) -> tuple[str | None, str | None, int]:
    """(process, time, where the message starts) in a line whose colours and redraws are already cut
    (the log pane's): past vLLM's "(P pid=N)" prefix or prefixes and its "LEVEL MM-DD hh:mm:ss
    [file:line] " or uvicorn's "LEVEL:   ", read as `split_line` reads them. (None, None, 0) when the
    line has neither."""
    end = process_end(line)
    process = line[1 : line.find(" pid=")] if end else None
    body = line[end:].lstrip() if end else line
    level, message = level_and_message(body)
    if level is None and not end:
        return None, None, 0
    time = None
    if level is not None and body[len(level) : len(level) + 1] == " ":
        stamp = body[len(level) + 7 : len(level) + 15]  # "INFO 05-12 02:45:35 …": the hh:mm:ss
        time = stamp if len(stamp) == 8 and stamp[2] == ":" and stamp[5] == ":" else None
    return process, time, (len(line.rstrip()) - len(message)) if message else len(line)


def split_line(raw: str) -> tuple[str | None, str | None, str]:
    """(process, level, message) of one raw log line; the message has no colours or prefix."""
    line = clean(raw)
    end = process_end(line)
    process = line[1 : line.find(" pid=")] if end else None
    level, message = level_and_message(line[end:].lstrip() if end else line)
    return process, level, message


def is_vllm_line(raw: str) -> bool:
    """True for a line in vLLM's own format: a "(Process pid=N)" prefix or a level ("INFO 05-12 02:45:35
    [file.py:1] …", uvicorn's "INFO:     …"), whatever another tool put before it."""
    process, level, _ = split_line(raw)
    return process is not None or level is not None
