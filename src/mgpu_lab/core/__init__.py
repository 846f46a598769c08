"""The shared core: exit statuses, atomic writes, the process table, loading a source file (stdlib only)."""
