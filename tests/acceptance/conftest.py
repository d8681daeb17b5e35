"""Shared fixtures for acceptance tests on a real Docker engine (marked ``engine``).

Nothing here is mocked. The engine, the stand-in base image and the local registry come
from ``scripts/ci-engine.sh up``, which exports ``ENVFORGE_TEST_REGISTRY`` and
``ENVFORGE_STANDIN_IMAGE`` (and writes them to ``$ENVFORGE_CI_STATE/env``, default
``/tmp/envforge-ci-engine/env``, read here when the variables are not set).

With ``ENVFORGE_REQUIRE_ENGINE=1`` (CI) a missing engine, registry or stand-in image
FAILS the tests; without it they are skipped.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import docker
import pytest

from envforge.backends.docker.client import EngineClient
from envforge.backends.docker.engine import connect
from envforge.backends.docker.images import inspect_image
from envforge.errors import Unavailable
from tests.helpers.wheels import pure_wheel

from .helpers import (
    BUILD_TIMEOUT,
    DEFAULT_STANDIN,
    Built,
    Envforge,
    build_args,
    parse_json,
    setting,
    unavailable,
)

#: CI runs the acceptance tests as two pytest runs side by side (``scripts/test``), each
#: given ``ENVFORGE_CI_SIDE``: ``engine`` runs the tests marked ``engine`` and these files,
#: one at a time (they share one Docker engine and two Podman ones: a test that counts
#: containers must be alone on them); ``rest`` everything else, on two pytest-xdist
#: workers, a file per worker at a time. The files here even the two sides out (seconds
#: per file end every CI log); unset, every test runs.
#: (2026-11-28: the rest side was the longer by ~200 s once the pip setup-script test
#: stopped installing real torch; the family test, ~140 s, moved to the engine side.)
BESIDE_ENGINE = frozenset({"test_render_venv_setup.py", "test_project_family.py"})
SIDES = ("engine", "rest")

#: The slowest files first (seconds per file of the CI logs), so that the workers do not
#: end on a long file each one starts last; the others keep their order after these.
SLOW_FIRST = (
    "test_venv_keep_certified.py", "test_project_venv.py", "test_venv_cpu.py",
    "test_fleet_slurm.py", "test_project_family.py", "test_venv_tamper.py",
    "test_probe_companions.py", "test_wheel_urls.py", "test_wheel_install.py",
    "test_output_paths.py", "test_net_hostile.py",
)  # fmt: skip


def _slow_first(item: pytest.Item) -> int:
    name = item.path.name
    return SLOW_FIRST.index(name) if name in SLOW_FIRST else len(SLOW_FIRST)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_slow_first)  # stable: a file's tests keep their order
    side = os.environ.get("ENVFORGE_CI_SIDE", "")
    if not side:
        return
    if side not in SIDES:
        raise pytest.UsageError(f"ENVFORGE_CI_SIDE={side!r}: use one of {', '.join(SIDES)}")
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        on_engine_side = (
            item.get_closest_marker("engine") is not None or item.path.name in BESIDE_ENGINE
        )
        (keep if on_engine_side == (side == "engine") else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture(scope="session")
def client() -> Iterator[EngineClient]:
    try:
        c = connect()
    except Unavailable as exc:
        unavailable(f"no Docker engine: {exc.one_line()} (run: bash scripts/ci-engine.sh up)")
        raise  # not reached
    yield c
    c.close()


@pytest.fixture(scope="session")
def sdk(client: EngineClient) -> docker.DockerClient:
    """The same client with the SDK's own type, for calls envforge never makes (list,
    remove, save): envforge's ``EngineClient`` Protocol declares only what it uses."""
    return cast("docker.DockerClient", client)


@pytest.fixture(scope="session")
def registry(client: EngineClient) -> str:
    value = setting("ENVFORGE_TEST_REGISTRY")
    if not value:
        unavailable("ENVFORGE_TEST_REGISTRY is not set (bash scripts/ci-engine.sh up sets it)")
    assert value is not None
    return value


@pytest.fixture(scope="session")
def standin(client: EngineClient) -> str:
    ref = setting("ENVFORGE_STANDIN_IMAGE", DEFAULT_STANDIN)
    assert ref is not None
    if inspect_image(client, ref) is None:
        unavailable(f"stand-in base image {ref} is missing (scripts/ci-engine.sh up builds it)")
    return ref


@pytest.fixture(scope="session")
def wheelhouse() -> Path:
    value = os.environ.get("PIP_FIND_LINKS")
    if not value or not Path(value).is_dir():
        unavailable("PIP_FIND_LINKS does not name the folder holding the torch wheel")
    assert value is not None
    return Path(value)


@pytest.fixture(scope="session")
def torch_standin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheelhouse whose ``torch-2.13.0+cpu`` is a tiny pure-Python stand-in (it has
    ``torch.__version__`` and nothing else): for tests of how images are built (builders,
    layers, installers, locks) that never run the probe. A real torch adds minutes per
    build there and nothing to what they check; every test that certifies uses the real
    wheel (``wheelhouse``). Its bytes differ from the real wheel's, so neither builder's
    cache can hand one's layer to the other."""
    folder = tmp_path_factory.mktemp("torch-standin")
    pure_wheel(folder, "torch", "2.13.0+cpu", "stand-in")
    return folder


@pytest.fixture(scope="session")
def ca_bundle() -> Path:
    value = os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt"
    if not Path(value).is_file():
        unavailable("PIP_CERT does not name a CA bundle")
    return Path(value)


@pytest.fixture(scope="session")
def envforge_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ENVFORGE_HOME (certificate store) for the whole session: build, then publish."""
    return tmp_path_factory.mktemp("envforge-home")


@pytest.fixture(scope="session")
def envforge(envforge_home: Path) -> Envforge:
    return Envforge(envforge_home)


@pytest.fixture(scope="session")
def built_cpu(  # noqa: PLR0917 - pytest fixtures
    client: EngineClient,
    envforge: Envforge,
    standin: str,
    wheelhouse: Path,
    ca_bundle: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Built:
    """``envforge build cpu`` with the stand-in base, the torch wheelhouse and the CA bundle."""
    report = tmp_path_factory.mktemp("build-cpu-report")
    completed = envforge(
        *build_args("cpu", standin, wheelhouse, ca_bundle, "--report", str(report), "--json"),
        timeout=BUILD_TIMEOUT,
    )
    assert completed.returncode == 0, (
        f"envforge build cpu exited {completed.returncode}:\n{completed.stderr[-5000:]}"
    )
    return Built(completed, parse_json(completed), report)


@pytest.fixture(scope="session")
def built_cpu_classic(
    envforge: Envforge, standin: str, torch_standin: Path, ca_bundle: Path
) -> Built:
    """``envforge build cpu`` with the classic builder forced (not certified; tagged), with
    the stand-in torch: it is looked at for what its layers hold, never probed."""
    completed = envforge(
        *build_args(
            "cpu",
            standin,
            torch_standin,
            ca_bundle,
            "--builder",
            "classic",
            "--no-certify",
            "--tag",
            "envforge-test/cpu:classic",
            "--json",
        ),
        timeout=BUILD_TIMEOUT,
    )
    assert completed.returncode == 0, (
        f"envforge build cpu --builder classic exited {completed.returncode}:\n"
        f"{completed.stderr[-5000:]}"
    )
    return Built(completed, parse_json(completed), Path())


@pytest.fixture(scope="session", params=["auto", "classic"])
def built_cpu_each(request: pytest.FixtureRequest) -> Built:
    """The cpu image from each builder: auto (BuildKit where available) and classic."""
    name = "built_cpu" if request.param == "auto" else "built_cpu_classic"
    built: Built = request.getfixturevalue(name)
    return built
