"""The memory guard: its lines, the pure decider, the thread that acts, the stop order among servers."""
