"""Two Sparks on one model: node checks over SSH, the link, worker streams, the Ray backend."""
