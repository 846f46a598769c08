"""Run folders: where a run lives, resuming it, continuing it, and its checkpoints."""
