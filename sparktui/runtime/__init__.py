"""The live parts (sampling, guard, process control, supervisor); never imports Textual."""
