"""Running one launched job: the process group, signals, and the monitor that watches it (stdlib only)."""
