"""Pure logic: no Textual, no subprocess, no I/O beyond reading files it is given."""
