"""The route (`sparktui route`): several profiles behind one OpenAI-compatible port, swapped by
the fit. front.py serves the API, swapper.py decides and carries out the swaps, servers.py starts
and stops through the supervisor, memory_back.py waits for a stopped server's memory."""
