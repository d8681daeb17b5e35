"""Issue 22 class 4: the one URL opener (``envforge.core.net``) reads only http(s) on the
configured hosts, whatever a server says: a listing's ``file://`` URL, a redirect to another
host or port or to ``file://``, a token realm elsewhere, a redirect loop.

A real server on 127.0.0.1 (tests/helpers/hostileserver.py) and its decoy on another port,
which answers everything as a well-behaved index or token service: a client that followed
a redirect or realm there would succeed, so each test also asserts the decoy was never
asked. The commands run in-process (``envforge.cli.main``); the same routes through real
processes: tests/acceptance/test_net_hostile.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from envforge.cli import main
from envforge.core.net import MAX_REDIRECTS, Deadline, NetError, Policy, fetch
from envforge.errors import EnvforgeError, ExitCode
from envforge.publish import registry
from tests.helpers.hostileserver import HostileServer, serve


@pytest.fixture(scope="module")
def server() -> Iterator[HostileServer]:
    yield from serve()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    for name in ("ENVFORGE_ALLOW_HOSTS", "ENVFORGE_INDEX_MIRROR", "ENVFORGE_NET_DEADLINE"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "home"


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.startswith("envforge: error:")]
    assert len(lines) == 1, err
    return lines[0]


def _get(server: HostileServer, route: str) -> NetError | bytes:
    url = f"{server.url}/{route}/torch/"
    try:
        reply = fetch(
            url,
            Policy.for_urls([server.url], environ={}),
            deadline=Deadline.start(10),
            limit=1 << 22,
        )
    except NetError as exc:
        return exc
    return reply.body


# --------------------------------------------------------------------------- the opener


@pytest.mark.parametrize(
    ("route", "kind", "words"),
    [
        ("tofile", "refused", "file URLs are not read"),
        ("cross", "refused", "to http://localhost:"),
        ("otherport", "refused", "which is not a configured host"),
        ("loop", "malformed", f"more than {MAX_REDIRECTS} redirects"),
        (f"hops/{MAX_REDIRECTS + 1}", "malformed", f"more than {MAX_REDIRECTS} redirects"),
    ],
)
def test_a_redirect_off_the_configured_host_or_past_the_limit_is_refused_and_named(
    server: HostileServer, route: str, kind: str, words: str
) -> None:
    asked = len(server.decoy_requests)
    got = _get(server, route)
    assert isinstance(got, NetError), got[:80]
    assert got.kind == kind
    assert got.url == f"{server.url}/{route}/torch/"  # the URL the command asked for
    assert words in got.reason
    if route == "otherport":
        assert f"http://127.0.0.1:{server.decoy_port}" in got.reason  # where it was sent
    assert server.decoy_requests[asked:] == []


def test_same_host_redirects_are_followed_up_to_the_limit(server: HostileServer) -> None:
    got = _get(server, f"hops/{MAX_REDIRECTS}")
    assert isinstance(got, bytes)
    assert b'"name"' in got  # the recorded torch page, after five hops


# --------------------------------------------------------------------------- refresh, status


@pytest.mark.parametrize(
    ("route", "words"),
    [
        ("tofile", "(redirected to file:///etc/passwd)"),
        ("otherport", "which is not a configured host"),
        ("loop", "more than 5 redirects"),
    ],
)
@pytest.mark.parametrize("command", ["refresh", "status"])
def test_refresh_and_status_redirected_off_the_index_are_exit_4_naming_it(  # noqa: PLR0917 - parametrize + fixtures
    server: HostileServer,
    home: Path,
    capsys: pytest.CaptureFixture[str],
    route: str,
    words: str,
    command: str,
) -> None:
    asked = len(server.decoy_requests)
    extra = ["--no-pytorch-index"] if command == "refresh" else []
    code = main(
        ["knowledge", command, *extra, "--deadline", "10", "--index", f"{server.url}/{route}"]
    )
    assert code == ExitCode.UNAVAILABLE
    line = _error(capsys)
    assert f"{server.url}/{route}/" in line
    assert words in line
    assert "did not answer" not in line  # it answered: what it said was refused
    assert ("ENVFORGE_ALLOW_HOSTS" in line) == (route == "otherport")  # the way out, if one
    assert server.decoy_requests[asked:] == []


@pytest.mark.parametrize(
    ("page", "url"), [("file-url.json", "file:///dev/zero"), ("ftp-url.json", "ftp://127.0.0.1/")]
)
def test_a_listing_naming_a_file_url_reads_nothing_local_and_is_exit_4(
    server: HostileServer,
    home: Path,
    capsys: pytest.CaptureFixture[str],
    page: str,
    url: str,
) -> None:
    code = main(
        [
            "knowledge",
            "refresh",
            "--no-pytorch-index",
            "--deadline",
            "10",
            "--index",
            f"{server.url}/corpus/{page}",
        ]
    )
    assert code == ExitCode.UNAVAILABLE
    line = _error(capsys)
    assert url in line
    assert "URLs are not read (only http and https)" in line
    sizes = [p.stat().st_size for p in home.rglob("*") if p.is_file()]
    assert max(sizes, default=0) < 1 << 20  # nothing of /dev/zero in the cache


# --------------------------------------------------------------------------- registries


REGISTRY_CASES = [
    ("realm-file", "file:///etc/passwd", "file URLs are not read"),
    ("realm-other", "http://10.255.255.1/token", "which is not a configured host"),
    ("realm-port", "/token", "which is not a configured host"),
    ("redirect-other", "http://10.255.255.1:", "a redirect from"),
    ("redirect-port", "/storage/blob", "a redirect from"),
    ("loop", "/manifests/v1", "more than 5 redirects"),
]


@pytest.mark.parametrize(("mode", "url", "words"), REGISTRY_CASES)
def test_a_registry_sending_envforge_elsewhere_is_refused_exit_4(
    server: HostileServer, home: Path, mode: str, url: str, words: str
) -> None:
    """image_labels (evidence import) and remote_image (verify) share the session."""
    asked = len(server.decoy_requests)
    server.registry = mode
    try:
        for read in (registry.image_labels, registry.remote_image):
            with pytest.raises(EnvforgeError) as info:
                read(f"127.0.0.1:{server.port}/team/cpu:v1")
            assert info.value.exit_code is ExitCode.UNAVAILABLE
            line = info.value.one_line()
            assert words in line
            assert url in line  # the URL it was sent to
            # the way out the hint names, where there is one
            assert ("ENVFORGE_ALLOW_HOSTS" in line) == (mode not in {"realm-file", "loop"})
            if mode.endswith("-port"):
                assert f"127.0.0.1:{server.decoy_port}" in line
    finally:
        server.registry = ""
    assert server.decoy_requests[asked:] == []


@pytest.mark.parametrize(("mode", "url", "words"), REGISTRY_CASES)
def test_evidence_import_from_such_a_registry_is_exit_4_naming_it(  # noqa: PLR0917 - parametrize + fixtures
    server: HostileServer,
    home: Path,
    capsys: pytest.CaptureFixture[str],
    mode: str,
    url: str,
    words: str,
) -> None:
    ref = f"127.0.0.1:{server.port}/team/cpu:v1"
    server.registry = mode
    try:
        code = main(["evidence", "import", "--deadline", "10", ref])
    finally:
        server.registry = ""
    assert code == ExitCode.UNAVAILABLE
    line = _error(capsys)
    assert f"a registry gave no usable answer: {ref}" in line
    assert words in line
    assert not (home / "evidence").exists() or not any((home / "evidence").rglob("*.json"))


def test_an_allowed_host_is_a_configured_host(
    server: HostileServer, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The way out the errors name: ENVFORGE_ALLOW_HOSTS makes the decoy's token service a
    configured host, and it is asked (its token, then the registry's own answer)."""
    monkeypatch.setenv("ENVFORGE_ALLOW_HOSTS", server.decoy)
    asked = len(server.decoy_requests)
    server.registry = "realm-port"
    try:
        with pytest.raises(EnvforgeError):  # the registry keeps answering 401
            registry.image_labels(f"127.0.0.1:{server.port}/team/cpu:v1")
    finally:
        server.registry = ""
    assert [p.split("?")[0] for p in server.decoy_requests[asked:]] == ["/token"]
