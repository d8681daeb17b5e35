"""The process model: the launcher, sub-reapers, and stopping a process tree via /proc.

The launcher runs no user code: it forks the worker, waits for it, kills every process
left below it and exits as the worker did (see the package's docstring). Stdlib-only,
Python 3.7 syntax: runs inside the environment under test.
"""

import contextlib
import os
import signal
import sys
import threading
import time

from .common import printable


def proc_table():
    """{pid: (ppid, state)} from /proc; None where there is no /proc."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    table = {}
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                data = fh.read().decode("ascii", "replace")
        except OSError:
            continue
        fields = data.rpartition(")")[2].split()
        if len(fields) > 2 and fields[1].lstrip("-").isdigit():
            table[int(name)] = (int(fields[1]), fields[0])
    return table


def descendants(root, table):
    """Live processes below root in table, parents before their children."""
    children = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        for pid in sorted(children.get(todo.pop(0), ())):
            if pid != root and pid not in found:
                found.append(pid)
                todo.append(pid)
    return [pid for pid in found if table[pid][1] not in ("Z", "X")]


def command_of(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            words = fh.read(200).split(b"\0")
    except OSError:
        return f"pid {pid}"
    text = " ".join(w.decode("utf-8", "replace") for w in words if w)
    return printable(f"{text[:60] or '?'} (pid {pid})")


def has_cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return bool(fh.read(1))
    except OSError:
        return False


def stop_descendants(root):
    """Freeze (SIGSTOP), then SIGKILL and reap every process below root; their commands.

    Freezing first keeps them from forking or moving away while the tree is walked. As a
    sub-reaper, root inherits every orphan below it, so nothing escapes by re-parenting.
    """
    table = proc_table()
    if table is None:  # no /proc: the process group is all there is to kill
        return []
    frozen = []
    for _ in range(200):
        new = [p for p in descendants(root, table) if p not in frozen]
        if not new:
            break
        for pid in new:
            frozen.append(pid)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGSTOP)
        table = proc_table() or {}
    # Name only what really was left running: a process already on its way out when
    # it was found (a double fork's middle process) ends on its own and has no cmdline.
    time.sleep(0.01)
    table = proc_table() or {}
    names = [
        command_of(pid)
        for pid in frozen
        if pid in table and table[pid][1] not in ("Z", "X") and has_cmdline(pid)
    ]
    for pid in frozen:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    reap(root, frozen)
    return names


def reap(root, pids, seconds=2.0):
    """Collect the zombies of killed processes that are (or became) children of root."""
    end = time.monotonic() + seconds
    while True:
        for pid in pids:
            with contextlib.suppress(OSError):
                os.waitpid(pid, os.WNOHANG)
        table = proc_table() or {}
        if not [p for p in pids if p in table and table[p][0] == root] or time.monotonic() > end:
            return
        time.sleep(0.01)


def become_subreaper():
    """Orphans below this process re-parent to it, not to init (Linux >= 3.4)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes  # noqa: PLC0415 - Linux only, and costs start-up elsewhere

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except Exception:
        return False


def watch_parent(on_orphaned):
    """Call on_orphaned() when the process that started this one goes away."""
    parent = os.getppid()
    if parent <= 1:
        return

    def loop():
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                on_orphaned()

    t = threading.Thread(target=loop, name="envforge-parent-watch")
    t.daemon = True
    t.start()


def worker_orphaned():
    # The launcher is gone: end whatever the steps started, and this worker.
    stop_descendants(os.getpid())
    try:
        if os.getpgid(0) == os.getpid():
            os.killpg(os.getpid(), signal.SIGKILL)
    except OSError:
        pass
    os._exit(3)


TREE_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")


def launch():
    """Split into launcher (this process) and worker (the child, which returns).

    The launcher waits for the worker, then kills every process left below it and exits
    with the worker's status: the same signal (so the host sees SIGSEGV as before), or
    128+N as PID 1, where the kernel drops signals PID 1 sends itself. TERM, INT, HUP and
    QUIT, and envforge going away, end the whole tree the same way.
    """
    if not hasattr(os, "fork"):
        return
    pid1 = os.getpid() == 1
    if not pid1:
        become_subreaper()
    try:
        child = os.fork()
    except OSError:  # no process to spare: run the steps in this one, unsupervised
        return
    if child == 0:
        # the worker leads a group of its own (killpg reaches its steps)
        with contextlib.suppress(OSError):
            os.setpgid(0, 0)
        return
    supervise(child, pid1)


def supervise(child, pid1):
    """The launcher's life: wait for the worker, stop what is left, exit as it did."""
    me = os.getpid()

    def end_all(signum=None, frame=None):
        with contextlib.suppress(OSError):
            os.kill(child, signal.SIGKILL)
        stop_descendants(me)
        os._exit(128 + (signum or signal.SIGKILL))

    for name in TREE_SIGNALS:
        signal.signal(getattr(signal, name), end_all)
    watch_parent(end_all)
    status = wait_for(child)
    for name in TREE_SIGNALS:
        signal.signal(getattr(signal, name), signal.SIG_IGN)  # the cleanup below must finish
    stop_descendants(me)
    exit_like(status, pid1)


def wait_for(child):
    """The wait status of child (reaping every orphan meanwhile); None if it is not ours."""
    while True:
        try:
            pid, got = os.wait()
        except ChildProcessError:
            return None
        except InterruptedError:
            continue
        if pid == child:
            return got


def exit_like(status, pid1):
    """Exit as the worker did: its signal (128+N as PID 1) or its exit code."""
    if status is None:
        os._exit(1)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if not pid1:
            mirror_signal(sig)
        os._exit(128 + sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def mirror_signal(sig):
    """Die of signal sig, as the worker did (no second core dump)."""
    try:
        import resource  # noqa: PLC0415 - only as the launcher dies of a signal

        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    except Exception:
        pass
    try:
        signal.signal(sig, signal.SIG_DFL)
        if hasattr(signal, "pthread_sigmask"):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
    except Exception:  # SIGKILL and SIGSTOP cannot be caught, blocked or reset
        pass
    try:
        os.kill(os.getpid(), sig)
        time.sleep(1.0)
    except Exception:
        pass
