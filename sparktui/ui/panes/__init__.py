"""The panes, in order. A new pane is a `Pane` subclass in its own module, added here: the app
lays it out, gives it a tab, binds the shared reactives it declares, and Ctrl+N reaches it."""

from __future__ import annotations

from sparktui.ui.panes.base import Pane
from sparktui.ui.panes.bench import BenchPane
from sparktui.ui.panes.config import ConfigPane
from sparktui.ui.panes.memory import MemoryPane
from sparktui.ui.panes.server import ServerPane

PANES: tuple[type[Pane], ...] = (ConfigPane, ServerPane, MemoryPane, BenchPane)

__all__ = ["PANES", "BenchPane", "ConfigPane", "MemoryPane", "Pane", "ServerPane"]
