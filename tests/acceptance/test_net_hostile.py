"""The network commands against a hostile server on 127.0.0.1 (tests/helpers/hostileserver.py):
a slow index (a byte every 2 s), one that sends nothing, endless and announced-huge pages, a
gzip bomb, redirects to another host or port, in a loop and to ``file://``, listings naming
``file://`` and ``ftp://`` files, deep JSON, no HTTP at all, a registry whose token realm or
blob redirect leaves its host or port, whose manifest redirects in a loop, whose blob drips,
whose manifest is endless or deep; Ctrl-C and SIGTERM during a stalled refresh.

The contract: exit 4 naming what could not be checked (or 130 after a signal), within the
overall deadline; never a traceback, a hang, a read outside the configured hosts, or
memory beyond the response limits.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from envforge.backends.docker import images
from envforge.backends.docker.client import EngineClient
from envforge.core.net import NotAnswered
from envforge.core.proc import Completed, run
from tests.helpers.hostileserver import HostileServer, serve

from .helpers import Envforge, parse_json

#: a hang guard for one command; the deadlines below are a few seconds
GUARD = 60.0


@pytest.fixture(scope="module")
def server() -> Iterator[HostileServer]:
    yield from serve()


@pytest.fixture
def cli(tmp_path: Path) -> Envforge:
    return Envforge(tmp_path / "home")


def _refresh(cli: Envforge, server: HostileServer, route: str, *extra: str) -> Completed:
    return cli(
        "knowledge",
        "refresh",
        "--no-pytorch-index",
        "--json",
        "--deadline",
        "4",
        "--index",
        f"{server.url}/{route}",
        *extra,
        timeout=GUARD,
    )


def _problems(data: dict[str, object]) -> dict[str, tuple[str, str]]:
    problems = data["problems"]
    assert isinstance(problems, list)
    return {p["url"]: (p["kind"], p["reason"]) for p in problems}


#: Runs the command after the file name and writes the most memory it used (KB) there. The
#: pytest process's own RUSAGE_CHILDREN covers every child of the session (a browser, a
#: torch import), so it cannot tell this command's peak.
_MEASURED = (
    "import resource, subprocess, sys; code = subprocess.run(sys.argv[2:]).returncode; "
    "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); "
    "sys.exit(code)"
)


@pytest.mark.parametrize(
    ("route", "kind", "words"),
    [
        ("drip", "timeout", "overall deadline of 4 s"),
        ("stall", "timeout", "overall deadline of 4 s"),
        ("huge", "too-large", "bytes"),
        ("announced", "too-large", "3000000000 bytes announced"),
        ("bomb", "too-large", "decoded"),
        ("cross", "refused", "http://localhost:"),
        ("otherport", "refused", "which is not a configured host"),
        ("loop", "malformed", "more than 5 redirects"),
        ("tofile", "refused", "file URLs are not read"),
        ("deep", "malformed", "nested deeper than 64 levels"),
        ("badhttp", "malformed", "not an HTTP answer"),
    ],
)
def test_a_hostile_index_is_exit_4_naming_the_listing(
    server: HostileServer, cli: Envforge, route: str, kind: str, words: str
) -> None:
    rss = cli.home.parent / "rss"
    done = run(
        [
            sys.executable,
            "-c",
            _MEASURED,
            str(rss),
            sys.executable,
            "-m",
            "envforge",
            "knowledge",
            "refresh",
            "--no-pytorch-index",
            "--json",
            "--deadline",
            "4",
            "--index",
            f"{server.url}/{route}",
            "--timeout",
            "30",
        ],
        timeout=GUARD,
        env=cli.env(),
    )
    assert done.returncode == 4, done.stderr
    assert "Traceback" not in done.stderr
    line = done.stderr.strip()
    assert len(line.splitlines()) == 1
    assert f"{server.url}/{route}/" in line
    assert kind in line
    assert words in line
    # the 2 GB page, the 3 GB announcement and the 256 MB bomb were never held in memory
    peak = int(rss.read_text())
    assert 0 < peak < 400 * 1024, f"the command grew to {peak} KB"


def test_partial_check_is_accepted_only_when_asked(server: HostileServer, cli: Envforge) -> None:
    done = _refresh(cli, server, "drip", "--index", f"{server.url}/simple", "--allow-partial")
    assert done.returncode == 0, done.stderr
    data = parse_json(done)
    assert data["complete"] is False
    assert _problems(data)[f"{server.url}/drip/torch/"][0] == "timeout"
    assert "2.15.0" in data["torch_versions"]  # the root that answered was checked
    text = cli(
        "knowledge",
        "refresh",
        "--no-pytorch-index",
        "--deadline",
        "4",
        "--index",
        f"{server.url}/drip",
        "--index",
        f"{server.url}/simple",
        timeout=GUARD,
    )
    assert text.returncode == 4
    # the index that did not answer is named (its own line; the problem lines that follow
    # are capped, and the watched companions' listings add problems of their own)
    drip = [ln for ln in text.stdout.splitlines() if ln.startswith(f"index {server.url}/drip:")]
    assert drip, text.stdout
    assert "did not answer" in drip[0]
    assert "could not be checked" in text.stderr


def test_status_of_a_stalled_index_is_exit_4_naming_it(
    server: HostileServer, cli: Envforge
) -> None:
    done = cli(
        "knowledge", "status", "--deadline", "3", "--index", f"{server.url}/stall", timeout=GUARD
    )
    assert done.returncode == 4
    assert f"{server.url}/stall/torch/" in done.stderr
    assert "overall deadline of 3 s" in done.stderr


def test_the_deadline_comes_from_the_environment(server: HostileServer, cli: Envforge) -> None:
    done = cli(
        "knowledge",
        "status",
        "--index",
        f"{server.url}/drip",
        timeout=GUARD,
        extra_env={"ENVFORGE_NET_DEADLINE": "2"},
    )
    assert done.returncode == 4
    assert "overall deadline of 2 s" in done.stderr
    bad = cli(
        "knowledge",
        "status",
        "--index",
        f"{server.url}/drip",
        timeout=GUARD,
        extra_env={"ENVFORGE_NET_DEADLINE": "soon"},
    )
    assert bad.returncode == 2
    assert "ENVFORGE_NET_DEADLINE" in bad.stderr


@pytest.mark.parametrize(
    ("page", "url_start", "words"),
    [
        ("file-url.json", "file:///dev/zero", "file URLs are not read"),
        ("ftp-url.json", "ftp://127.0.0.1/", "ftp URLs are not read"),
    ],
)
def test_a_listed_file_url_of_another_scheme_is_refused_and_named(
    server: HostileServer, cli: Envforge, page: str, url_start: str, words: str
) -> None:
    done = _refresh(cli, server, f"corpus/{page}", "--allow-partial")
    assert done.returncode == 0, done.stderr
    problems = _problems(parse_json(done))
    refused = {u: r for u, r in problems.items() if u.startswith(url_start)}
    assert refused, problems
    assert all(kind == "refused" and words in reason for kind, reason in refused.values())
    # nothing was read from the local file into the cache
    cache = cli.home / "cache" / "index"
    sizes = [p.stat().st_size for p in cache.rglob("*") if p.is_file()]
    assert max(sizes, default=0) < 4 * 1024 * 1024


def test_a_listed_file_on_another_host_is_not_requested(
    server: HostileServer, cli: Envforge
) -> None:
    done = _refresh(cli, server, "corpus/other-host-url.json", "--allow-partial")
    data = parse_json(done)
    assert not [u for u in _problems(data) if "10.255.255.1" in u]  # never asked
    assert any(
        "10.255.255.1, not a configured host" in n and "ENVFORGE_ALLOW_HOSTS" in n
        for n in data["notes"]
    )


@pytest.mark.parametrize(
    "page",
    [
        "wrong-api.json",
        "files-not-objects.json",
        "files-not-a-list.json",
        "not-an-object.json",
        "not-utf8.json",
        "no-tags.html",
    ],
)
def test_a_malformed_listing_is_named(server: HostileServer, cli: Envforge, page: str) -> None:
    done = _refresh(cli, server, f"corpus/{page}")
    assert done.returncode == 4
    assert "Traceback" not in done.stderr
    assert f"{server.url}/corpus/{page}/torch/: malformed:" in done.stderr


def test_an_escape_in_a_listed_url_is_printed_escaped(server: HostileServer, cli: Envforge) -> None:
    done = cli(
        "knowledge",
        "refresh",
        "--no-pytorch-index",
        "--deadline",
        "4",
        "--allow-partial",
        "--index",
        f"{server.url}/corpus/esc-in-url.json",
        timeout=GUARD,
    )
    assert "\x1b" not in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def _stalled_refresh(cli: Envforge, server: HostileServer) -> subprocess.Popen[bytes]:
    since = len(server.requests)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "envforge",
            "knowledge",
            "refresh",
            "--no-pytorch-index",
            "--deadline",
            "600",
            "--index",
            f"{server.url}/drip",
        ],
        env=cli.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    server.wait_for("/drip/", since)
    time.sleep(0.5)  # the request is in flight, its answer dripping
    return proc


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_a_stalled_refresh_exits_130_at_once(
    server: HostileServer, cli: Envforge, sig: signal.Signals
) -> None:
    proc = _stalled_refresh(cli, server)
    sent = time.monotonic()
    proc.send_signal(sig)
    try:
        _out, err = proc.communicate(timeout=GUARD)
    finally:
        if proc.poll() is None:  # reaped and its pipes closed: nothing leaks into later tests
            proc.kill()
            proc.communicate()
    took = time.monotonic() - sent
    assert proc.returncode == 130, err
    assert err.decode().strip() == "envforge: interrupted"
    # a hang guard, not a speed target: the dripping answer would hold it for minutes
    assert took < 10, f"{took:.1f} s after the signal"


# --------------------------------------------------------------------------- registry


@pytest.mark.parametrize(
    ("mode", "code", "words"),
    [
        ("realm-file", 4, "file URLs are not read"),
        ("realm-other", 4, "http://10.255.255.1, which is not a configured host"),
        ("redirect-other", 4, "a redirect from"),
        ("redirect-port", 4, "which is not a configured host"),
        ("loop", 4, "more than 5 redirects"),
        ("drip", 4, "overall deadline of 3 s"),
        ("huge", 4, "more than"),
        ("deep", 4, "nested deeper than 64 levels"),
    ],
)
def test_a_hostile_registry_is_named_and_bounded(
    server: HostileServer, cli: Envforge, mode: str, code: int, words: str
) -> None:
    """Exit 4 when the registry did not answer in time, or answered what cannot be used
    (refused, too large, malformed), naming it; the decoy on another port is never asked."""
    asked = len(server.decoy_requests)
    server.registry = mode
    try:
        done = cli(
            "evidence",
            "import",
            "--deadline",
            "3",
            f"127.0.0.1:{server.port}/team/cpu:v1",
            timeout=GUARD,
        )
    finally:
        server.registry = ""
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    assert words in done.stderr
    assert f"127.0.0.1:{server.port}" in done.stderr
    assert server.decoy_requests[asked:] == []


@pytest.mark.parametrize("command", [["verify"], ["evidence", "import"]])
def test_a_dripping_blob_is_named_not_the_manifest(
    server: HostileServer, cli: Envforge, command: list[str]
) -> None:
    """The manifest answered; what did not answer by the deadline was the config blob,
    and that is the URL the error names (it named the manifest before)."""
    server.registry = "drip"
    try:
        done = cli(
            *command, "--deadline", "3", f"127.0.0.1:{server.port}/team/cpu:v1", timeout=GUARD
        )
    finally:
        server.registry = ""
    assert done.returncode == 4, done.stderr
    assert f"{server.url}/v2/team/cpu/blobs/sha256:{'a' * 64}: " in done.stderr
    assert "/manifests/" not in done.stderr


@pytest.mark.engine
def test_sigterm_during_a_stalled_pull_exits_130(
    server: HostileServer, cli: Envforge, client: EngineClient
) -> None:
    """The Docker path too: ``verify`` waits on the engine's pull of a registry that
    drips; SIGTERM ends it like Ctrl-C (exit 130, one line), not by the default action."""
    server.registry = "drip"
    since = len(server.requests)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "envforge",
            "verify",
            "--pull",
            f"127.0.0.1:{server.port}/team/cpu:v1",
        ],
        env=cli.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        server.wait_for("/v2/", since)
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=GUARD)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        server.registry = ""
    assert proc.returncode == 130, err
    assert err.decode().strip().splitlines()[-1] == "envforge: interrupted"


@pytest.mark.engine
@pytest.mark.parametrize("command", [["pull"], ["verify", "--pull"]])
def test_a_pull_from_a_dripping_registry_is_exit_4_at_the_deadline(
    server: HostileServer, cli: Envforge, client: EngineClient, command: list[str]
) -> None:
    """The engine's pull of a config blob that drips a byte every 2 s made no progress
    for ever (no exit after 40 s before); now exit 4 naming the image at --deadline."""
    server.registry = "drip"
    try:
        started = time.monotonic()
        done = cli(
            *command, "--deadline", "3", f"127.0.0.1:{server.port}/team/cpu:v1", timeout=GUARD
        )
        took = time.monotonic() - started
    finally:
        server.registry = ""
    assert done.returncode == 4, done.stderr
    line = done.stderr.strip()
    assert len(line.splitlines()) == 1
    assert f"cannot pull 127.0.0.1:{server.port}/team/cpu:v1: timeout: no progress for 3 s" in line
    assert took < 30, f"{took:.1f} s"  # a hang guard, not a speed target


@pytest.mark.engine
def test_a_push_to_a_registry_that_takes_no_blobs_is_exit_4_at_the_deadline(
    server: HostileServer, client: EngineClient, standin: str
) -> None:
    """The engine retries a refused blob upload with a countdown (5, 10, 15, 20 s: about
    50 s before it gives up); a countdown is no progress, so --deadline ends it (the push
    ``publish`` makes, on the real engine)."""
    ref = f"127.0.0.1:{server.port}/envforge-test/push:t"
    found = images.inspect_image(client, standin)
    assert found is not None
    images.tag_image(client, found.id, ref)
    server.registry = "drip"
    lines: list[str] = []
    try:
        started = time.monotonic()
        with pytest.raises(NotAnswered) as info:
            images.push(client, ref, stall=3, on_line=lines.append)
        took = time.monotonic() - started
    finally:
        server.registry = ""
        images.untag(client, ref)
    assert f"push of {ref} failed: timeout: no progress for 3 s" in str(info.value)
    assert any(line.endswith("Preparing") for line in lines), lines
    assert took < 30, f"{took:.1f} s"  # a hang guard; the engine alone took about 50 s
