"""One vocabulary for a server's condition, read from the supervisor's state record.

The supervisor records `status` (starting | running | stopping | exited, or `lost` when a reader
finds its supervisor dead), `phase` (the log parser's start-up phase) and `exit` (reason,
return code, failure). The CLI, the TUI and anything else that shows a server says it with one
of these words:

    starting (phase)   start-up, with the phase the log has reached
    ready              /health answers
    stopping           sparktui is stopping it
    stopped (how)      it ended as asked: stopped, killed, or exited cleanly
    failed (kind)      vLLM failed (a vllm_log failure kind) or the memory guard stopped it ("guard")
    lost (reason)      its supervisor died; the next launch sweeps what it left
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Word = Literal["starting", "ready", "stopping", "stopped", "failed", "lost"]
WORDS: tuple[Word, ...] = ("starting", "ready", "stopping", "stopped", "failed", "lost")
LIVE: tuple[Word, ...] = ("starting", "ready", "stopping")

# How a stopped server ended, in words (the supervisor's exit reasons).
_STOPPED_HOW = {"stopped": "stopped", "killed": "killed", "exited": "exited"}


@dataclass(frozen=True)
class Condition:
    word: Word
    phase: str | None = None  # starting: the start-up phase; failed: how far start-up got
    kind: str | None = None  # failed: vllm_log failure kind, or "guard"
    how: str | None = None  # stopped: stopped | killed | exited
    reason: str | None = None  # lost: why
    returncode: int | None = None

    @property
    def live(self) -> bool:
        return self.word in LIVE

    def text(self) -> str:
        """The condition as one short phrase: "failed (kv_too_small)", "stopped (killed)"."""
        detail = {
            "starting": (self.phase or "").replace("_", " "),
            "failed": self.kind,
            "stopped": self.how if self.how not in (None, "stopped") else None,
            "lost": self.reason,
        }.get(self.word)
        return f"{self.word} ({detail})" if detail and detail != "starting" else self.word

    def code_text(self) -> str:
        """The exit status in words ("exit status 1", "signal 9"); empty when unknown."""
        code = self.returncode
        if code is None or self.live:
            return ""
        return f"signal {-code}" if code < 0 else f"exit status {code}"

    def exit_text(self) -> str:
        """How it ended, for a detail line; empty while it runs. Never "exit None"."""
        if self.live:
            return ""
        return ", ".join(x for x in (self.text(), self.code_text()) if x)


def condition_of(record: Mapping[str, Any]) -> Condition:
    """The condition of the server a supervisor's state record describes."""
    status = record.get("status")
    phase = record.get("phase")
    exit_info: Mapping[str, Any] = record.get("exit") or {}
    returncode = exit_info.get("returncode")
    if status == "starting":
        return Condition("starting", phase="starting" if phase in (None, "launching") else phase)
    if status == "running":
        return Condition("ready")
    if status == "stopping":
        return Condition("stopping")
    if status == "lost":
        return Condition("lost", reason="its supervisor died")
    reason = exit_info.get("reason")
    summary: Mapping[str, Any] = record.get("summary") or {}
    reached = phase if phase not in (None, "failed", "stopped", "launching") else None
    if reason == "guard" or record.get("trip"):
        return Condition("failed", phase=reached, kind="guard", returncode=returncode)
    if reason == "supervisor_died":
        return Condition("lost", reason="its supervisor died; swept", returncode=returncode)
    failure: Mapping[str, Any] = exit_info.get("failure") or summary.get("failure") or {}
    if reason == "failed" or failure:
        return Condition("failed", phase=reached, kind=str(failure.get("kind") or "unknown"), returncode=returncode)
    if reason in _STOPPED_HOW:
        if reason == "exited" and returncode not in (None, 0):
            return Condition("failed", phase=reached, kind="exit", returncode=returncode)
        return Condition("stopped", how=_STOPPED_HOW[reason], returncode=returncode)
    return Condition("stopped", how=str(reason) if reason else None, returncode=returncode)
