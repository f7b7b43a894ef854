"""The Textual app, a thin client over core and runtime."""
