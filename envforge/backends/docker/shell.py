"""``envforge shell`` in a container: cache volumes, env, ``docker run`` argv, signals."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

import docker.types

from envforge.backends.docker.client import EngineClient
from envforge.backends.docker.containers import (
    STOPPED_STATES,
    ensure_cache_volume,
    remove_by_name,
    unique_name,
)
from envforge.backends.docker.engine import identify_engine
from envforge.backends.docker.leftovers import bound, owner_labels
from envforge.backends.docker.sdkerrors import TRANSPORT_ERRORS
from envforge.container.caches import (
    CACHE_ROOT,
    SHELL_HOME,
    SHELL_WORKDIR,
    CacheVolume,
    cache_env,
    cache_volumes,
)
from envforge.container.devices import DeviceFlags
from envforge.container.refs import ROLE_LABEL
from envforge.core.proc import spawn
from envforge.errors import InvalidInput, Unavailable

__all__ = [
    "CACHE_ROOT",
    "SHELL_HOME",
    "SHELL_WORKDIR",
    "CacheVolume",
    "cache_env",
    "cache_volumes",
    "mount_option",
    "run_shell",
    "shell_argv",
    "shell_env",
    "shell_mounts",
]


def shell_env(recipe_env: Mapping[str, str], flags: DeviceFlags) -> dict[str, str]:
    """The shell's env: cache locations and HOME, then the recipe's (which win), NPROC_PER_NODE."""
    env = cache_env()
    env["HOME"] = SHELL_HOME
    env.update(recipe_env)
    env.update(flags.env)  # --gpu: the visible-device variables
    env["NPROC_PER_NODE"] = str(max(flags.gpu_count, 1))
    return env


def shell_argv(
    *,
    image: str,
    command: Sequence[str],
    name: str,
    env: Mapping[str, str],
    flags: DeviceFlags,
    cwd: Path,
    volumes: Sequence[CacheVolume],
    user: str,
    tty: bool,
    docker_cli: str = "docker",
    init: bool = True,
    labels: Mapping[str, str] | None = None,
) -> list[str]:
    """``docker run ...`` for :func:`run_shell` (pure; unit-tested).

    No ``--rm``: the docker CLI's ``run --rm`` against Podman's Docker API reports exit
    status 0 whatever the command returned; :func:`run_shell` removes the container by
    name afterwards instead, on every engine.
    """
    argv = [docker_cli, "run", "--name", name, "--label", f"{ROLE_LABEL}=shell", "-i"]
    for key, value in (labels or {}).items():  # the owner (see .leftovers)
        argv += ["--label", f"{key}={value}"]
    # An init as PID 1 (docker-init): the command is not PID 1, so a signal it has no
    # handler for (SIGTERM to `sleep`) ends it as outside a container; the CLI passes
    # the signals it gets on to the container (--sig-proxy, said for clarity).
    # Without an init (``init`` False: Podman without catatonit), the command is PID 1.
    argv += ["--init", "--sig-proxy=true"] if init else ["--sig-proxy=true"]
    if tty:
        argv.append("-t")
    # An image's HEALTHCHECK would run a command of the image's choosing next to the
    # user's, with the working folder mounted: never (certificates bind it, too).
    argv += ["--no-healthcheck"]
    argv += ["--user", user, "--network", "host", "--workdir", SHELL_WORKDIR]
    argv += ["--tmpfs", f"{SHELL_HOME}:rw,exec,mode=1777"]
    for mount in shell_mounts(cwd, volumes):
        argv += ["--mount", mount_option(mount)]
    for key, value in env.items():
        argv += ["--env", f"{key}={value}"]
    argv += flags.cli_args()
    argv.append(image)
    argv += list(command)
    return argv


def shell_mounts(cwd: Path, volumes: Sequence[CacheVolume]) -> list[docker.types.Mount]:
    """What ``shell`` mounts, as structured objects: the working folder (read-write) at
    /workspace, then the cache volumes. A path is one value here, whatever it holds."""
    return [
        docker.types.Mount(SHELL_WORKDIR, str(cwd), type="bind"),
        *(docker.types.Mount(vol.mount, vol.name, type="volume") for vol in volumes),
    ]


def mount_option(mount: Mapping[str, Any]) -> str:
    """The docker CLI's ``--mount`` value for one structured mount.

    The CLI reads the value as one CSV record (Go's encoding/csv), so every field is
    written quoted, a quote doubled: a comma, '=', ':', a quote, a space or a line feed in
    a path stays in the path (from a folder named ``q,consistency=cached`` the unquoted
    form mounted its sibling ``q``). A carriage return is refused: CSV turns CR LF into LF.
    """
    fields = [f"type={mount['Type']}", f"source={mount['Source']}", f"target={mount['Target']}"]
    if mount.get("ReadOnly"):
        fields.append("readonly")
    for field in fields:
        if "\r" in field or "\x00" in field:
            raise InvalidInput(
                f"{field.partition('=')[2]}: a carriage return in a mounted folder's path "
                "cannot be passed to the docker CLI's --mount (it reads CSV)",
                hint="run envforge shell from a folder whose path has none, or rename it",
            )
    return ",".join('"' + field.replace('"', '""') + '"' for field in fields)


#: Seconds the docker CLI may take to return once its container has exited.
CLI_GRACE = 5.0
_EXITED = STOPPED_STATES


class ExitWatch:
    """Watches the named container through the API: has it exited, with what code?

    The exit code comes from the engine, not from the docker CLI: against Podman 4.3's
    Docker API the CLI reports 0 for ``run --rm``, and without ``--rm`` it can miss the
    exit of a quick command and wait for ever (its wait for the "next exit" is registered
    after the exit). Polls ``inspect`` every ``poll`` seconds in a daemon thread.
    """

    def __init__(self, client: EngineClient, name: str, poll: float = 0.25) -> None:
        self._client = client
        self._name = name
        self._poll = poll
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._exited_at: float | None = None
        self._thread = threading.Thread(target=self._run, name="shell-exit", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)

    def _state(self) -> dict[str, Any] | None:
        try:
            container = self._client.containers.get(self._name)
        except TRANSPORT_ERRORS:  # NotFound included (an APIError, a DockerException)
            return None
        state = container.attrs.get("State")
        return state if isinstance(state, dict) else None

    def _run(self) -> None:
        while not self._done.wait(self._poll):
            state = self._state()
            if state is not None and str(state.get("Status", "")).lower() in _EXITED:
                with self._lock:
                    self._exited_at = time.monotonic()
                return

    def exited_for(self) -> float:
        """Seconds since the container was seen exited (0 while it runs)."""
        with self._lock:
            return 0.0 if self._exited_at is None else time.monotonic() - self._exited_at

    def final_code(self) -> int | None:
        """The container's exit code from the engine (None: it never ran, or is gone)."""
        state = self._state()
        if state is None or str(state.get("Status", "")).lower() not in _EXITED:
            return None
        code = state.get("ExitCode")
        return int(code) if isinstance(code, int) else None


def wait_for_cli(proc: subprocess.Popen[bytes], watch: ExitWatch, grace: float = CLI_GRACE) -> int:
    """The docker CLI's exit code; a CLI still waiting ``grace`` seconds after its
    container exited is stopped (the container's own code is taken from the engine)."""
    while True:
        try:
            return proc.wait(timeout=0.25)
        except subprocess.TimeoutExpired:
            if watch.exited_for() > grace:
                proc.terminate()
                try:
                    return proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    return proc.wait()


#: Signals envforge passes on to the ``docker run`` client, which passes them on to the
#: container (its --sig-proxy); SIGWINCH lets a TTY follow the terminal's size.
_FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGWINCH")


#: Podman's default ``init_path`` (containers.conf); Docker ships docker-init itself.
PODMAN_INIT = Path("/usr/libexec/podman/catatonit")


def engine_has_init(kind: str, podman_init: Path = PODMAN_INIT) -> bool:
    """Whether ``run --init`` works: always on Docker; on Podman only with catatonit
    installed (else Podman refuses to create the container: "container-init binary not
    found on the host"). Podman runs are local (a unix socket), so the host's file tells."""
    return kind != "podman" or podman_init.exists()


def run_shell(
    client: EngineClient,
    *,
    image: str,
    command: Sequence[str],
    recipe_name: str,
    stack_tag: str,
    env: Mapping[str, str],
    flags: DeviceFlags,
    cwd: Path,
) -> int:
    """Run ``command`` in ``image`` through the ``docker`` CLI; return its exit code.

    The docker CLI does what the SDK makes hard: a real TTY (raw mode, resizes) and
    signal proxying. It reads DOCKER_HOST / DOCKER_CONTEXT / the current context the same
    way :func:`connect` does, and it runs with this process's environment. The container
    has a unique name and is removed by name afterwards in every outcome (a ``finally``
    with SIGINT/SIGTERM held during the removal), not by ``--rm`` (see :func:`shell_argv`).
    """
    cli = shutil.which("docker")
    if cli is None:
        raise Unavailable(
            "the docker CLI is not on PATH (envforge shell runs it for TTY and signals)",
            hint="install docker.io (or docker-ce-cli)",
        )
    volumes = cache_volumes(recipe_name, stack_tag, os.getuid())
    for vol in volumes:
        ensure_cache_volume(client, vol.name, image, vol.subdirs)
    name = unique_name("shell")
    argv = shell_argv(
        image=image,
        command=command,
        name=name,
        env=shell_env(env, flags),
        flags=flags,
        cwd=cwd,
        volumes=volumes,
        user=f"{os.getuid()}:{os.getgid()}",
        tty=sys.stdin.isatty(),
        docker_cli=cli,
        init=engine_has_init(identify_engine(client).kind),
        labels=owner_labels(),
    )
    handlers: dict[int, Any] = {}
    watch = ExitWatch(client, name)
    # bound: an envforge killed by SIGKILL leaves no container running (a watcher removes it)
    with bound(name):
        return _run_bound(client, name, argv, watch, handlers)


def _run_bound(
    client: EngineClient, name: str, argv: list[str], watch: ExitWatch, handlers: dict[int, Any]
) -> int:
    """:func:`run_shell` once its container is bound to this process."""
    try:
        watch.start()
        with spawn(argv, stdin=None, stdout=None, stderr=None, grace=10.0) as proc:

            def forward(signum: int, _frame: object) -> None:
                with suppress(ProcessLookupError):
                    os.kill(proc.pid, signum)

            for sig_name in _FORWARDED:
                sig = getattr(signal, sig_name, None)
                if sig is not None:
                    handlers[int(sig)] = signal.signal(sig, forward)
            code = wait_for_cli(proc, watch)
        final = watch.final_code()
        if final is not None:
            code = final
    finally:
        watch.stop()
        # The container goes first (SIGINT/SIGTERM held while it is removed), while the
        # forwarding handlers still stand: a signal now cannot cut the removal short.
        try:
            remove_by_name(client, name)
        finally:
            for signum, old in handlers.items():
                signal.signal(signum, old)
    return code if code >= 0 else 128 - code
