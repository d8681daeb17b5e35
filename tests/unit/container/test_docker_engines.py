"""Engine identification, CDI specs and device paths, on recorded responses and fixture trees."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envforge.backends.docker.containers import sdk_kwargs
from envforge.container.cdi import CdiInventory, parse_spec, scan
from envforge.container.devices import DeviceFlags, SharedMemory, device_flags
from envforge.container.identity import EngineIdentity, engine_kind, identify, version_tuple
from envforge.errors import DataFileError
from tests.helpers import paths

FIXTURES = paths.TESTS / "fixtures"
ENGINES = FIXTURES / "engines"
CDI = FIXTURES / "cdi"
SYSFS = FIXTURES / "sysfs"


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((ENGINES / name).read_text())
    return data


def _cdi_roots(tree: str) -> tuple[Path, Path]:
    return (CDI / tree / "etc" / "cdi", CDI / tree / "var" / "run" / "cdi")


PODMAN = identify(_load("podman-4.3.1-version.json"), _load("podman-4.3.1-rootful-info.json"))
PODMAN_ROOTLESS = identify(
    _load("podman-4.3.1-version.json"),
    _load("podman-4.3.1-rootless-info.json"),
    _load("podman-4.3.1-rootless-libpod-info.json"),
)
PODMAN5 = identify(_load("podman-5.2.2-version.json"), _load("podman-4.3.1-rootful-info.json"))
DOCKER_OLD = identify(_load("docker-20.10-version.json"), _load("docker-20.10-info.json"))
DOCKER_CDI = identify(_load("docker-27.5-version.json"), _load("docker-27.5-cdi-info.json"))


# --------------------------------------------------------------------------- identity


def test_podman_is_told_from_docker_by_the_version_response() -> None:
    assert engine_kind(_load("podman-4.3.1-version.json")) == "podman"
    assert engine_kind(_load("docker-20.10-version.json")) == "docker"
    assert engine_kind(_load("docker-27.5-version.json")) == "docker"
    # Only the platform name says Podman (some builds list no components).
    assert engine_kind({"Platform": {"Name": "Podman Engine"}, "Version": "5.2.0"}) == "podman"
    assert engine_kind({}) == "docker"


def test_identity_of_recorded_engines() -> None:
    assert (
        EngineIdentity(
            kind="podman", version="4.3.1", rootless=False, cdi=False, cdi_reason=PODMAN.cdi_reason
        )
        == PODMAN
    )
    # Measured: Podman 4.3's Docker API stats a CDI name as a path.
    assert "does not resolve CDI" in PODMAN.cdi_reason
    assert PODMAN5.cdi
    assert PODMAN.label == "Podman 4.3.1"
    assert PODMAN_ROOTLESS.rootless
    assert PODMAN_ROOTLESS.label == "Podman 4.3.1 (rootless)"
    assert DOCKER_OLD.kind == "docker"
    assert DOCKER_OLD.version == "20.10.24+dfsg1"
    assert not DOCKER_OLD.cdi
    assert "predates" in DOCKER_OLD.cdi_reason
    assert DOCKER_CDI.cdi
    assert "/etc/cdi" in DOCKER_CDI.cdi_reason


def test_rootless_podman_is_told_by_libpod_info_not_docker_info() -> None:
    version = _load("podman-4.3.1-version.json")
    # Podman 4.3's Docker /info looks the same rootful and rootless.
    assert not identify(version, _load("podman-4.3.1-rootless-info.json")).rootless
    rootful = identify(
        version,
        _load("podman-4.3.1-rootful-info.json"),
        _load("podman-4.3.1-rootful-libpod-info.json"),
    )
    assert not rootful.rootless
    assert PODMAN_ROOTLESS.rootless
    # A rootless Docker says so in /info.
    docker_rootless = identify(
        _load("docker-27.5-version.json"),
        {"SecurityOptions": ["name=seccomp,profile=builtin", "name=rootless"]},
    )
    assert docker_rootless.rootless
    assert docker_rootless.kind == "docker"


def test_docker_25_without_the_cdi_feature_keeps_raw_nodes() -> None:
    version = _load("docker-27.5-version.json")
    info = {**_load("docker-27.5-cdi-info.json"), "CDISpecDirs": []}
    ident = identify(version, info)
    assert not ident.cdi
    assert '"cdi": true' in ident.cdi_reason


def test_version_tuple() -> None:
    assert version_tuple("20.10.24+dfsg1") == (20, 10, 24)
    assert version_tuple("v4.3.1") == (4, 3, 1)
    assert version_tuple("dev") == ()


# --------------------------------------------------------------------------- CDI specs


def test_cdi_specs_of_both_vendors_are_found() -> None:
    nvidia = scan(_cdi_roots("h100"))
    assert nvidia.request_for("nvidia") == "nvidia.com/gpu=all"
    assert nvidia.request_for("amd") is None
    assert "nvidia.com/gpu=0" in nvidia.devices_of("nvidia.com/gpu")
    amd = scan(_cdi_roots("mi300x"))
    assert amd.request_for("amd") == "amd.com/gpu=all"
    assert amd.devices_of("amd.com/gpu") == ("amd.com/gpu=0", "amd.com/gpu=1", "amd.com/gpu=all")
    assert scan(_cdi_roots("none")) == CdiInventory()
    assert scan((CDI / "absent",)) == CdiInventory()


def test_broken_cdi_specs_become_notes_naming_file_and_key() -> None:
    inv = scan(_cdi_roots("broken"))
    assert inv.specs == ()
    assert len(inv.notes) == 2
    assert any("bad.yaml: devices[0].name" in n for n in inv.notes)
    assert any("invalid.yaml" in n and "not valid YAML" in n for n in inv.notes)


def test_a_spec_without_kind_is_refused_naming_the_key(tmp_path: Path) -> None:
    spec = tmp_path / "x.yaml"
    spec.write_text("cdiVersion: 0.5.0\ndevices: []\n")
    with pytest.raises(DataFileError, match=r"x\.yaml: kind"):
        parse_spec(spec)


def test_a_huge_cdi_spec_is_skipped_not_read(tmp_path: Path) -> None:
    root = tmp_path / "cdi"
    root.mkdir()
    (root / "big.json").write_bytes(b" " * (5 * 1024 * 1024))
    inv = scan((root,))
    assert inv.specs == ()
    assert "bytes allowed" in inv.notes[0]


# --------------------------------------------------------------------------- device paths


def test_nvidia_by_cdi_name_on_docker_with_cdi() -> None:
    flags = device_flags(
        "nvidia",
        dev_root=SYSFS / "h100" / "dev",
        proc_root=SYSFS / "h100" / "proc",
        engine=DOCKER_CDI,
        cdi_roots=_cdi_roots("h100"),
    )
    assert flags.path == "cdi"
    assert flags.cdi_devices == ("nvidia.com/gpu=all",)
    assert not flags.gpu_request
    assert flags.ipc_mode == "host"
    (request,) = sdk_kwargs(flags)["device_requests"]
    assert request["Driver"] == "cdi"
    assert request["DeviceIDs"] == ["nvidia.com/gpu=all"]
    assert "devices" not in sdk_kwargs(flags)
    assert flags.cli_args() == ["--device", "nvidia.com/gpu=all", "--ipc=host"]
    assert "nvidia.com/gpu=all" in flags.reason
    assert "CDI" in flags.reason


def test_nvidia_without_engine_cdi_keeps_the_gpu_request_and_says_why() -> None:
    flags = device_flags(
        "nvidia",
        dev_root=SYSFS / "h100" / "dev",
        proc_root=SYSFS / "h100" / "proc",
        engine=DOCKER_OLD,
        cdi_roots=_cdi_roots("h100"),
    )
    assert flags.path == "request"
    assert flags.gpu_request
    assert flags.cdi_devices == ()
    assert "predates" in flags.reason
    assert "nvidia.yaml" in flags.reason
    no_spec = device_flags(
        "nvidia",
        dev_root=SYSFS / "h100" / "dev",
        proc_root=SYSFS / "h100" / "proc",
        engine=DOCKER_CDI,
        cdi_roots=_cdi_roots("none"),
    )
    assert no_spec.path == "request"
    assert "no CDI spec names nvidia GPUs" in no_spec.reason


def test_nvidia_on_podman_is_cdi_or_nothing() -> None:
    flags = device_flags(
        "nvidia",
        dev_root=SYSFS / "h100" / "dev",
        proc_root=SYSFS / "h100" / "proc",
        engine=PODMAN5,
        cdi_roots=_cdi_roots("h100"),
    )
    assert flags.path == "cdi"
    assert flags.engine == "podman"
    # Podman takes CDI names as devices, not as a device request.
    kwargs = sdk_kwargs(flags)
    assert kwargs["devices"] == ["nvidia.com/gpu=all"]
    assert "device_requests" not in kwargs
    without = device_flags(
        "nvidia",
        dev_root=SYSFS / "h100" / "dev",
        proc_root=SYSFS / "h100" / "proc",
        engine=PODMAN,
        cdi_roots=_cdi_roots("none"),
    )
    assert without.path == "none"
    assert not without.gpu_request
    assert "containers/podman#22645" in without.reason
    assert "nvidia-ctk cdi generate" in without.reason
    # Podman 4.3: a spec is there, but its Docker API cannot take the name.
    old = device_flags(
        "nvidia",
        dev_root=SYSFS / "h100" / "dev",
        proc_root=SYSFS / "h100" / "proc",
        engine=PODMAN,
        cdi_roots=_cdi_roots("h100"),
    )
    assert old.path == "none"
    assert "does not resolve CDI" in old.reason
    assert "nvidia-ctk" not in old.reason  # the spec is there already
    assert sdk_kwargs(old) == {"ipc_mode": "host"}


def test_amd_by_cdi_name_or_raw_nodes() -> None:
    dev = SYSFS / "mi300x" / "dev"
    raw = device_flags(
        "amd",
        dev_root=dev,
        proc_root=SYSFS / "mi300x" / "proc",
        engine=DOCKER_OLD,
        cdi_roots=_cdi_roots("mi300x"),
    )
    assert raw.path == "raw"
    assert raw.devices == (str(dev / "kfd"), str(dev / "dri"))
    assert "predates" in raw.reason
    cdi = device_flags(
        "amd",
        dev_root=dev,
        proc_root=SYSFS / "mi300x" / "proc",
        engine=PODMAN5,
        cdi_roots=_cdi_roots("mi300x"),
    )
    assert cdi.path == "cdi"
    assert cdi.devices == ()
    assert cdi.cdi_devices == ("amd.com/gpu=all",)
    assert sdk_kwargs(cdi)["devices"] == ["amd.com/gpu=all"]
    # Groups, seccomp and IPC stay whatever the path.
    assert cdi.group_add == raw.group_add
    assert cdi.group_add[0] == "video"
    assert cdi.security_opt == ("seccomp=unconfined",)
    assert cdi.ipc_mode == "host"


def test_rootless_podman_amd_keeps_the_users_groups() -> None:
    flags = device_flags(
        "amd",
        dev_root=SYSFS / "mi300x" / "dev",
        proc_root=SYSFS / "mi300x" / "proc",
        engine=PODMAN_ROOTLESS,
        cdi_roots=_cdi_roots("none"),
    )
    assert flags.path == "raw"
    assert flags.group_add == ("keep-groups",)
    assert flags.cli_args().count("--group-add") == 1


@pytest.mark.parametrize(("tree", "vendor"), [("h100", "nvidia"), ("mi300x", "amd")])
def test_sized_shm_instead_of_host_ipc(tree: str, vendor: str) -> None:
    flags = device_flags(
        vendor,
        dev_root=SYSFS / tree / "dev",
        proc_root=SYSFS / tree / "proc",
        engine=DOCKER_OLD,
        cdi_roots=_cdi_roots("none"),
        shm=SharedMemory.sized("16g"),
    )
    assert flags.ipc_mode is None
    assert flags.shm_size == "16g"
    assert sdk_kwargs(flags)["shm_size"] == "16g"
    assert "ipc_mode" not in sdk_kwargs(flags)
    cli = flags.cli_args()
    assert cli[cli.index("--shm-size") + 1] == "16g"
    assert not any(a.startswith("--ipc") for a in cli)
    default = device_flags(
        vendor,
        dev_root=SYSFS / tree / "dev",
        proc_root=SYSFS / tree / "proc",
        engine=DOCKER_OLD,
        cdi_roots=_cdi_roots("none"),
    )
    assert default.ipc_mode == "host"
    assert default.shm_size is None


def test_cpu_recipes_get_no_host_ipc_but_the_shm_size_asked_for() -> None:
    flags = device_flags(
        "none",
        dev_root=SYSFS / "h100" / "dev",
        proc_root=SYSFS / "h100" / "proc",
        shm=SharedMemory.sized("1g"),
    )
    assert flags == DeviceFlags(shm_size="1g")
    assert flags.ipc_mode is None


def test_push_digest_from_podmans_status_line() -> None:
    from envforge.backends.docker.images import digest_in_status

    digest = "sha256:" + "3" * 64
    assert digest_in_status(f"torch2.13.0-cpu-py3.11: digest: {digest} size: 743") == digest
    assert digest_in_status("Pushed") is None
    assert digest_in_status("digest: sha256:short") is None


def test_shm_size_option_is_checked_and_docker_only(capsys: pytest.CaptureFixture[str]) -> None:
    from envforge.cli import main

    assert main(["build", "cpu", "--shm-size", "12x"]) == 2
    assert "is not a size" in capsys.readouterr().err
    assert main(["build", "cpu", "--backend", "venv", "--shm-size", "16g"]) == 2
    err = capsys.readouterr().err
    assert "--shm-size" in err
    assert "only for --backend docker" in err
