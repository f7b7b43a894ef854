"""The supervisor that owns one running vLLM, and its parts: reaper, log tail, cluster launch."""
