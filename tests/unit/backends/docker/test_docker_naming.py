"""Tag names, registry references and the shell's docker run line."""

from __future__ import annotations

from pathlib import Path

import pytest

from envforge.backends.docker.shell import (
    SHELL_HOME,
    cache_env,
    cache_volumes,
    shell_argv,
    shell_env,
)
from envforge.container.devices import DeviceFlags
from envforge.container.refs import certified_ref, registry_ref, split_ref
from envforge.errors import InvalidInput


def test_certified_ref_uses_the_documented_scheme() -> None:
    assert (
        certified_ref("gfx1010", "torch1.13.1-rocm5.2-py3.10")
        == "envforge/gfx1010:torch1.13.1-rocm5.2-py3.10"
    )


@pytest.mark.parametrize(
    ("registry", "expected"),
    [
        ("127.0.0.1:5000", "127.0.0.1:5000/cpu:torch2.13.0-cpu-py3.11"),
        ("127.0.0.1:5000/team", "127.0.0.1:5000/team/cpu:torch2.13.0-cpu-py3.11"),
        ("registry.example/a/b/", "registry.example/a/b/cpu:torch2.13.0-cpu-py3.11"),
        ("http://localhost:5000", "localhost:5000/cpu:torch2.13.0-cpu-py3.11"),
    ],
)
def test_registry_ref(registry: str, expected: str) -> None:
    assert registry_ref(registry, "cpu", "torch2.13.0-cpu-py3.11") == expected


@pytest.mark.parametrize(
    "registry", ["", "host:port", "host:5000/Upper", "a b", "host:5000/x:tag", "-host"]
)
def test_registry_ref_refuses_bad_input(registry: str) -> None:
    with pytest.raises(InvalidInput, match="HOST\\[:PORT\\]"):
        registry_ref(registry, "cpu", "t")


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("envforge/cpu:t1", ("envforge/cpu", "t1")),
        ("127.0.0.1:5000/cpu:t1", ("127.0.0.1:5000/cpu", "t1")),
        ("127.0.0.1:5000/cpu", ("127.0.0.1:5000/cpu", None)),
        ("r:5000/cpu@sha256:ab", ("r:5000/cpu@sha256:ab", None)),
        ("sha256:" + "a" * 64, ("sha256:" + "a" * 64, None)),
    ],
)
def test_split_ref(ref: str, expected: tuple[str, str | None]) -> None:
    assert split_ref(ref) == expected


def test_cache_volumes_are_per_user_recipe_and_stack() -> None:
    vols = cache_volumes("gfx1010", "torch1.13.1-rocm5.2-py3.10", 1000)
    assert [v.name for v in vols] == [
        "envforge-gfx1010-torch1.13.1-rocm5.2-py3.10-u1000-miopen",
        "envforge-gfx1010-torch1.13.1-rocm5.2-py3.10-u1000-torch",
    ]
    env = cache_env()
    mounts = [v.mount for v in vols]
    for key in (
        "MIOPEN_USER_DB_PATH",
        "MIOPEN_CUSTOM_CACHE_DIR",
        "TORCHINDUCTOR_CACHE_DIR",
        "TRITON_CACHE_DIR",
        "PYTORCH_KERNEL_CACHE_PATH",
    ):
        assert any(env[key].startswith(m + "/") for m in mounts), key


def test_two_users_of_one_host_never_share_a_cache_volume() -> None:
    """MIOpen databases break when shared (ROCm/MIOpen#1878): one set of volumes per uid."""
    alice = cache_volumes("gfx1010", "s", 1000)
    bob = cache_volumes("gfx1010", "s", 1001)
    root = cache_volumes("gfx1010", "s", 0)
    names = [{v.name for v in vols} for vols in (alice, bob, root)]
    assert not names[0] & names[1]
    assert not names[0] & names[2]
    assert not names[1] & names[2]
    # Every cache env var lives under one of the user's own volumes.
    for key, path in cache_env().items():
        assert any(path.startswith(v.mount + "/") for v in alice), key


def test_shell_env_recipe_wins_and_nproc_is_gpu_count() -> None:
    amd = DeviceFlags(vendor="amd", gpu_count=4)
    env = shell_env({"MIOPEN_USER_DB_PATH": "/custom", "HSA_X": "1"}, amd)
    assert env["MIOPEN_USER_DB_PATH"] == "/custom"
    assert env["HSA_X"] == "1"
    assert env["NPROC_PER_NODE"] == "4"
    assert env["HOME"] == SHELL_HOME
    assert shell_env({}, DeviceFlags())["NPROC_PER_NODE"] == "1"


@pytest.mark.parametrize("tty", [True, False])
def test_shell_argv(tty: bool) -> None:
    flags = DeviceFlags(vendor="amd", devices=("/dev/kfd",), ipc_mode="host", gpu_count=1)
    vols = cache_volumes("cpu", "s", 1000)
    argv = shell_argv(
        image="sha256:abc",
        command=["python", "-c", "print(1)"],
        name="envforge-shell-x",
        env={"A": "b c"},
        flags=flags,
        cwd=Path("/home/me/proj"),
        volumes=vols,
        user="1000:1000",
        tty=tty,
    )
    # No --rm: `docker run --rm` against Podman's API reports 0 whatever the command
    # returned; the container is removed by name afterwards instead.
    assert argv[:4] == ["docker", "run", "--name", "envforge-shell-x"]
    assert "--rm" not in argv
    assert ("-t" in argv) is tty
    assert "-i" in argv
    assert "--init" in argv  # the command is not PID 1: SIGTERM ends `sleep` too
    assert "--sig-proxy=true" in argv
    assert argv[argv.index("--user") + 1] == "1000:1000"
    assert argv[argv.index("--workdir") + 1] == "/workspace"
    # each --mount value a quoted CSV record (issue 27 class 6)
    assert '"type=bind","source=/home/me/proj","target=/workspace"' in argv
    for vol in vols:
        assert f'"type=volume","source={vol.name}","target={vol.mount}"' in argv
    assert argv[argv.index("--env") + 1] == "A=b c"
    assert "--device" in argv
    assert "--ipc=host" in argv
    # The image, then the command exactly as given (never through a shell).
    assert argv[-4:] == ["sha256:abc", "python", "-c", "print(1)"]
