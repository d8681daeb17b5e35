"""envforge's probe worker: a stdlib-only package run inside the environment under test.

envforge runs this package *inside* the environment under test (the current interpreter,
a virtualenv, a container, a Kubernetes pod) where envforge itself is not installed. Its
modules must therefore import nothing but the standard library at top level, and keep to
Python 3.7 syntax (tests parse every module with ast.parse(feature_version=(3, 7))). torch
and numpy are imported only inside steps.

Shipped as one text file (:func:`envforge.probe.bundle.worker_source`): :mod:`.boot` with
the sources of these modules in it, imported from memory as the package
``envforge_probe_worker``; nothing is written or installed in the target.

Usage:  python worker.py SPEC      SPEC is a JSON text, a path to a JSON file, or "-"
                                   (read the JSON from stdin).
        python -c SOURCE SPEC      works the same (nothing relies on __file__).

Protocol (:mod:`.driver`): one JSON object per line on stdout, flushed at once; nothing
else ever goes to stdout (fd 1 is pointed at stderr; events use a private duplicate of it):
  {"event": "hello", "pid": N, "python": "3.11.7", "protocol": 1}
  {"event": "start", "step": NAME, "deadline": SECONDS}
  {"event": "end", "step": NAME, "status": S, "seconds": F, "detail": TEXT, "data": {...}}
  {"event": "done"}
S is one of pass, fail, oom, no-device, skip. The host runner adds hang and crash: it owns
the deadlines and kills this process (its whole group, or its container) when a step
overruns. The worker never waits on a deadline itself, except for a backstop alarm that
ends an orphaned worker long after the runner would have.

Processes (:mod:`.processes`): on POSIX the worker runs as two processes. The first (the
*launcher*) runs no user code: it becomes a child sub-reaper (Linux prctl; as PID 1 it is
one anyway), forks the worker, waits for it, then kills every process still below it
(found by walking /proc: a check's setsid'd or double-forked daemons are re-parented to
it, never to init) and exits with the worker's status (the same signal, or 128+N as
PID 1). It does the same on SIGTERM and when envforge goes away. The worker is a
sub-reaper too: after each check step it stops whatever the check left running; the step
keeps its own status and its detail names what was stopped.

Modules: :mod:`.common` (text, errors, the step context), :mod:`.versions` (the
environment and its pins), :mod:`.device` (device and memory), :mod:`.tensors` (numeric
steps), :mod:`.companions` (torchvision, torchaudio), :mod:`.packages` (import:NAME),
:mod:`.checks` (a project's check files), :mod:`.collective` (the all-reduce across
devices, when asked), :mod:`.processes` (launcher, process tree),
:mod:`.driver` (the step loop and the event stream), :mod:`.boot` (the shipped file).
"""
