"""Words both ends of the launcher share, spelled once (no imports: the launcher's ``--dry_run`` reads them too)."""

#: The environment variable naming the job across restarts and nodes (the launcher sets it; rank 0 keeps it).
JOB_KEY_ENV = "MGPU_LAB_JOB_KEY"
#: The value of ``--checkpoint``, ``--continue_run``, ``stacks`` and ``timing`` that means "the newest".
LATEST = "latest"
