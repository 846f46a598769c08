"""Every deadline of the launcher's teardown, signalling and ticking, in one place, named for what it bounds.

Each is the longest the launcher waits for one thing before it acts on its own, so that no stop can hang. Where the
user's grace period (``MGPU_LAB_KILL_GRACE_S``) is shorter, the stops below that name it take the shorter one.
"""

#: How often the supervisor ticks while a job runs: the watchdog, the rendezvous deadline, live stack requests.
TICK_S = 0.2

#: The grace the monitor gives a job it stops itself (a hang, the rendezvous deadline) before SIGKILL.
MONITOR_STOP_GRACE_S = 3.0
#: After the job's main process ended: SIGTERM to what it left behind, then SIGKILL after this long.
LEFTOVERS_TERM_S = 3.0
#: After that: how long the launcher keeps killing and reaping before it leaves the rest to its janitor.
REAP_S = 5.0
#: How long the job's stderr is still read once torchrun is gone (a leftover worker may hold the pipe).
DRAIN_S = 1.0

#: The janitor (the launcher died): SIGTERM to the job's tagged processes, then SIGKILL after this long.
JANITOR_TERM_S = 5.0
#: Emptying the job's cgroup at the end of a job: how long its processes get to leave it once killed.
CGROUP_EMPTY_S = 5.0
#: The same, by the janitor of a launcher that died (it has nothing else to do, so it waits longer).
CGROUP_JANITOR_EMPTY_S = 10.0

#: How long a rank gets to write its stack after the stack signal before it counts as not responding.
STACK_WAIT_S = 5.0
