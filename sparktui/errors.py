"""Errors a person can act on: what (file, field or flag), what was expected, what to do."""


class UserError(Exception):
    """Bad input from the user. The CLI prints it as one line and exits 2, never a traceback."""

    exit_code = 2
