"""Rank health, both ends of one protocol: heartbeats and failure records written by ranks, the
watchdog, live stacks and the failure report read by the launcher (stdlib only)."""
