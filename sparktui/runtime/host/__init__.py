"""The box itself: memory and PSI readings, NVML, processes and their trees, cgroup scopes, inotify."""
