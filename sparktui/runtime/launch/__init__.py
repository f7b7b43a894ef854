"""How a server is launched: the command for a profile's runner, vLLM's version, a rank's link environment."""
