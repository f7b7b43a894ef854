"""Messages the workers post to the app (results of I/O, never raw callbacks)."""

from __future__ import annotations

from typing import Any

from textual.message import Message


class MemorySampled(Message):
    def __init__(self, sample: Any, gpu: Any, error: str | None) -> None:
        super().__init__()
        self.sample, self.gpu, self.error = sample, gpu, error


class SpecLoaded(Message):
    def __init__(self, model: str, spec: Any, machine: Any, error: str | None) -> None:
        super().__init__()
        self.model, self.spec, self.machine, self.error = model, spec, machine, error


class ProfileLoaded(Message):
    def __init__(self, profile: Any, error: str | None, source: str) -> None:
        super().__init__()
        self.profile, self.error, self.source = profile, error, source


class ServerUpdate(Message):
    """The supervisor's view of the server, after an action or a poll."""

    def __init__(self, status: Any, error: str | None = None, action: str = "poll") -> None:
        super().__init__()
        self.status, self.error, self.action = status, error, action


class LogBatch(Message):
    """New log lines, and what the log parser made of everything so far."""

    def __init__(
        self,
        lines: list[str],
        phase: str,
        reached: str,
        actual: list[tuple[str, str]],
        diagnosis: tuple[str, str, str] | None,
    ) -> None:
        super().__init__()
        self.lines, self.phase, self.reached, self.actual, self.diagnosis = lines, phase, reached, actual, diagnosis


class LogUnavailable(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class MetricsUpdate(Message):
    def __init__(self, figures: list[tuple[str, str]], snapshot: Any, error: str | None) -> None:
        super().__init__()
        self.figures, self.snapshot, self.error = figures, snapshot, error


class Notice(Message):
    def __init__(self, text: str, severity: str = "information") -> None:
        super().__init__()
        self.text, self.severity = text, severity
