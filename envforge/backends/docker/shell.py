"""``envforge shell`` in a container: cache volumes, env, ``docker run`` argv, signals."""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envforge.backends.docker.client import EngineClient
from envforge.backends.docker.containers import ensure_cache_volume, remove_by_name, unique_name
from envforge.backends.docker.devices import DeviceFlags
from envforge.backends.docker.refs import ROLE_LABEL
from envforge.errors import Unavailable
from envforge.proc import spawn

#: Fixed paths inside a shell container.
SHELL_WORKDIR = "/workspace"
SHELL_HOME = "/home/envforge"
CACHE_ROOT = "/var/cache/envforge"


@dataclass(frozen=True)
class CacheVolume:
    name: str
    mount: str
    subdirs: tuple[str, ...]


def cache_volumes(recipe_name: str, stack_tag: str) -> tuple[CacheVolume, ...]:
    """Named volumes that keep kernel caches between shells (one set per recipe and stack)."""
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", f"envforge-{recipe_name}-{stack_tag}")
    return (
        CacheVolume(f"{stem}-miopen", f"{CACHE_ROOT}/miopen", ("db", "cache")),
        CacheVolume(f"{stem}-torch", f"{CACHE_ROOT}/torch", ("inductor", "triton", "kernels")),
    )


def cache_env() -> dict[str, str]:
    """Env vars pointing MIOpen, TorchInductor, Triton and torch's kernel cache at the volumes."""
    return {
        "MIOPEN_USER_DB_PATH": f"{CACHE_ROOT}/miopen/db",
        "MIOPEN_CUSTOM_CACHE_DIR": f"{CACHE_ROOT}/miopen/cache",
        "TORCHINDUCTOR_CACHE_DIR": f"{CACHE_ROOT}/torch/inductor",
        "TRITON_CACHE_DIR": f"{CACHE_ROOT}/torch/triton",
        "PYTORCH_KERNEL_CACHE_PATH": f"{CACHE_ROOT}/torch/kernels",
    }


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
) -> list[str]:
    """``docker run --rm ...`` for :func:`run_shell` (pure; unit-tested)."""
    argv = [docker_cli, "run", "--rm", "--name", name, "--label", f"{ROLE_LABEL}=shell", "-i"]
    # An init as PID 1 (docker-init): the command is not PID 1, so a signal it has no
    # handler for (SIGTERM to `sleep`) ends it as outside a container; the CLI passes
    # the signals it gets on to the container (--sig-proxy, said for clarity).
    argv += ["--init", "--sig-proxy=true"]
    if tty:
        argv.append("-t")
    argv += ["--user", user, "--network", "host", "--workdir", SHELL_WORKDIR]
    argv += ["--mount", f"type=bind,source={cwd},target={SHELL_WORKDIR}"]
    argv += ["--tmpfs", f"{SHELL_HOME}:rw,exec,mode=1777"]
    for vol in volumes:
        argv += ["--mount", f"type=volume,source={vol.name},target={vol.mount}"]
    for key, value in env.items():
        argv += ["--env", f"{key}={value}"]
    argv += flags.cli_args()
    argv.append(image)
    argv += list(command)
    return argv


#: Signals envforge passes on to the ``docker run`` client, which passes them on to the
#: container (its --sig-proxy); SIGWINCH lets a TTY follow the terminal's size.
_FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGWINCH")


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
    has a unique name and is removed afterwards in every outcome (``--rm``, then by name).
    """
    cli = shutil.which("docker")
    if cli is None:
        raise Unavailable(
            "the docker CLI is not on PATH (envforge shell runs it for TTY and signals)",
            hint="install docker.io (or docker-ce-cli)",
        )
    volumes = cache_volumes(recipe_name, stack_tag)
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
    )
    handlers: dict[int, Any] = {}
    try:
        with spawn(argv, stdin=None, stdout=None, stderr=None, grace=10.0) as proc:

            def forward(signum: int, _frame: object) -> None:
                with suppress(ProcessLookupError):
                    os.kill(proc.pid, signum)

            for sig_name in _FORWARDED:
                sig = getattr(signal, sig_name, None)
                if sig is not None:
                    handlers[int(sig)] = signal.signal(sig, forward)
            code = proc.wait()
    finally:
        for signum, old in handlers.items():
            signal.signal(signum, old)
        remove_by_name(client, name)
    return code if code >= 0 else 128 - code
