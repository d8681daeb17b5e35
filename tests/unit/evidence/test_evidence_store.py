"""The local evidence store: what is kept of a report (never host or user names), import,
export (redacted), the "certified on" line of ``show``, and reading a registry image's
certificate label through the HTTP API (a real HTTP server on loopback)."""

from __future__ import annotations

import getpass
import hashlib
import json
import socket
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from envforge.cli import main
from envforge.errors import InvalidInput, Unavailable
from envforge.evidence import evidence_db, local_store
from envforge.evidence.certified_on import certified_on
from envforge.evidence.evidence_store import (
    export_lines,
    import_paths,
    read_store,
    record,
    sanitized_report,
)
from envforge.evidence.records import Redactor, read_evidence
from envforge.probe.report import ReportGpu, ReportHost
from envforge.publish.certificate import VenvBinding, issue
from envforge.publish.registry import image_labels, parse_ref
from tests.helpers.httpserver import Handler, serving
from tests.helpers.matrix_synth import Spec, make_certificate, make_report

WHEN = datetime(2026, 11, 20, 12, 0, tzinfo=timezone.utc)
GPU = Spec(
    vendor="amd",
    arch="gfx1031",
    product="AMD Radeon RX 6700 XT",
    driver="amdgpu (in-tree, kernel 6.8.0-45-generic)",
    recipe="gfx1031",
    stack="torch2.13.0-rocm7.1-py3.12",
    outcome="pass",
    created=WHEN,
)
NAMES = Redactor(("alice", "alice-ws"))


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _named_report(spec: Spec = GPU, host_id: str | None = "h-0123456789abcdef") -> Any:
    """A report that mentions the user (alice) and the host (alice-ws) everywhere it can."""
    report = make_report(replace(spec, detail="failed in /home/alice/x.py on alice-ws"))
    host = ReportHost(
        kernel=report.host.kernel,
        machine="x86_64",
        gpus=tuple(replace(g, pci_id="1002:73df") for g in report.host.gpus),
        driver=report.host.driver,
        id=host_id,
    )
    data = replace(report, host=host).to_dict()
    data["environment"]["snapshot"]["env"] = {"HSA_PATH": "/home/alice/rocm", "HOST": "alice-ws"}
    data["steps"][0]["detail"] = "user alice on alice-ws, cwd /home/alice/src"
    return data


def stored_texts(home: Path) -> list[str]:
    """Every report the store keeps, as stored (the database's ``document`` column)."""
    with evidence_db.connect(home / "evidence.sqlite") as conn:
        return evidence_db.documents(conn)


def test_a_stored_probe_report_keeps_host_facts_and_no_host_or_user_names(home: Path) -> None:
    stored = record(_named_report(), redact=NAMES)
    assert stored == home / "evidence.sqlite"
    (text,) = stored_texts(home)
    for name in ("alice", "alice-ws"):
        assert name not in text.replace("<redacted>", ""), name
    data = json.loads(text)
    assert data["environment"]["target"] == "python"
    assert sorted(data["environment"]["snapshot"]) == ["cuda", "hip", "python", "torch"]
    (kept,) = read_store().records
    assert kept.gpu.product == "AMD Radeon RX 6700 XT"
    assert kept.gpu.arch == "gfx1031"
    assert kept.pci_id == "1002:73df"
    assert kept.driver.startswith("amdgpu")
    assert kept.kernel == "Linux 6.8.0-45-generic"
    assert kept.runtime == "HIP 7.1.32830"
    assert kept.envforge_version == "0.1.0"
    assert kept.host == "h-0123456789abcdef"
    # Stored twice: one row.
    record(_named_report(), redact=NAMES)
    assert len(stored_texts(home)) == 1


@pytest.mark.parametrize("fake", [False, True], ids=["real-names", "named-host"])
def test_this_hosts_names_are_never_stored(
    home: Path, monkeypatch: pytest.MonkeyPatch, fake: bool
) -> None:
    """With the default redactor (this host's name and user): the real ones, and a host
    and user with long, distinctive names (so that the check can fail anywhere)."""
    if fake:
        monkeypatch.setattr(socket, "gethostname", lambda: "gpu-runner-17.lab.example")
        monkeypatch.setattr(getpass, "getuser", lambda: "carol")
    host = socket.gethostname()
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = ""
    names = [n for n in (host, host.split(".")[0], user) if len(n) >= 3 and n != "root"]
    if not names:
        pytest.skip("this host's name and user are too short or root: nothing to look for")
    data = make_report(GPU).to_dict()
    data["environment"]["target"] = f"/srv/{names[0]}/venv/bin/python"
    data["steps"][1]["detail"] = " ".join(f"seen {n} here" for n in names)
    data["environment"]["snapshot"]["platform"] = f"Linux on {names[0]}"
    venv_certificate = issue(  # as the venv backend issues its evidence
        report=sanitized_report(data),
        recipe_name="gfx1031",
        recipe_hash="sha256:x",
        stack_tag="",
        binding=VenvBinding("f"),
    )
    record(venv_certificate)
    record(dict(data, created="2026-11-21T12:00:00Z"))  # another run
    read_store()  # the certificate store read in
    texts = stored_texts(home)
    assert len(texts) == 2
    for text in texts:
        for name in names:
            assert name not in text


def test_export_is_redacted_and_imports_back_into_another_store(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record(_named_report(), redact=NAMES)
    cert = make_certificate(replace(GPU, recipe="gfx1031", created=WHEN + timedelta(days=1)))
    (home / "certificates").mkdir(parents=True)
    (home / "certificates" / "c.json").write_text(json.dumps(cert))
    lines = list(export_lines(read_store().records, redact=NAMES))
    assert len(lines) == 2
    joined = "\n".join(lines)
    assert "alice" not in joined.replace("<redacted>", "")
    assert "executable" not in joined
    assert "/home/" not in joined.replace("/home/~", "")
    first = json.loads(lines[0])
    assert first["schema"] == "envforge.evidence/1"
    assert {"target", "environment", "snapshot"}.isdisjoint(first)
    assert first["certificate"] == cert["digest"]
    only = list(export_lines(read_store().records, recipe="cpu"))
    assert only == []

    bundle = tmp_path / "bundle.jsonl"
    assert main(["evidence", "export", "-o", str(bundle)]) == 0
    assert len(bundle.read_text().splitlines()) == 2
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "other"))
    result = import_paths([bundle])
    assert len(result.added) == 2
    assert result.problems == ()
    again = import_paths([bundle])
    assert (len(again.added), again.known) == (0, 2)
    assert {r.key for r in read_store().records} == {
        json.loads(line)["key"] for line in bundle.read_text().splitlines()
    }


def test_import_reports_what_it_skips_and_refuses_nothing_readable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "junk.json").write_text('{"schema": "other"}')
    assert main(["evidence", "import", str(tmp_path / "junk.json")]) == 2
    err = capsys.readouterr().err
    assert "skipped" in err
    assert "no evidence could be read" in err
    # A missing folder that looks like a path is never a registry request.
    assert main(["evidence", "import", "reports/run1"]) == 2
    assert "nor an image reference with a registry host" in capsys.readouterr().err
    make_report(GPU).write(tmp_path / "run")
    assert main(["evidence", "import", str(tmp_path / "run"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["added"] == 1


def _spec(**changes: Any) -> Spec:
    return replace(GPU, **changes)


def _records(*specs: Spec, host_ids: tuple[str, ...] = ()) -> Any:
    docs = []
    for i, spec in enumerate(specs):
        report = make_report(spec)
        hid = host_ids[i] if i < len(host_ids) else None
        docs.append(replace(report, host=replace(report.host, id=hid)).to_dict())
    return docs


def test_certified_on_names_gpus_drivers_hosts_and_the_newest_date(tmp_path: Path) -> None:
    docs = _records(
        _spec(),
        _spec(created=WHEN - timedelta(days=3), driver="amdgpu 6.5.0"),
        _spec(created=WHEN - timedelta(days=9)),
        _spec(outcome="hang", created=WHEN + timedelta(days=1)),  # a failure: not counted
        host_ids=("h-1", "h-2", "h-3", "h-4"),
    )
    for i, doc in enumerate(docs):
        (tmp_path / f"{i}.json").write_text(json.dumps(doc))
    records = read_evidence([tmp_path], NAMES).records
    assert certified_on(records, "gfx1031") == (
        "certified on AMD Radeon RX 6700 XT (gfx1031), driver 6.5.0–6.8.0, 3 hosts, "
        "newest 2026-11-20"
    )
    assert certified_on(records, "gfx1100") == "not yet certified on any GPU"


def test_certified_on_names_the_recipes_arch_first_and_counts_the_rest(tmp_path: Path) -> None:
    others = [
        _spec(product=f"Other GPU {i}", arch=f"gfx10{i}0", created=WHEN - timedelta(days=i))
        for i in range(1, 5)
    ]
    mine = _spec(created=WHEN - timedelta(days=20))
    docs = _records(
        *others,
        replace(others[0], created=WHEN - timedelta(days=7)),
        mine,
        host_ids=("h-1", "h-2", "h-3", "h-4", "h-5", "h-6"),
    )
    for i, doc in enumerate(docs):
        (tmp_path / f"{i}.json").write_text(json.dumps(doc))
    records = read_evidence([tmp_path], NAMES).records
    line = certified_on(records, "gfx1031", arch="gfx1031")
    assert line.startswith("certified on AMD Radeon RX 6700 XT (gfx1031), driver 6.8.0, 1 host")
    assert "; Other GPU 1 (gfx1010), driver 6.8.0, 2 hosts" in line
    assert line.endswith("; and 2 more GPUs")


def test_certified_on_cpu_only_and_never_passed(tmp_path: Path) -> None:
    cpu = _spec(
        vendor="none",
        arch=None,
        product="",
        driver="",
        recipe="cpu",
        stack="torch2.13.0-cpu-py3.11",
    )
    fail = _spec(outcome="fail", recipe="gfx1010")
    for i, doc in enumerate(_records(cpu, fail)):
        (tmp_path / f"{i}.json").write_text(json.dumps(doc))
    records = read_evidence([tmp_path], NAMES).records
    assert certified_on(records, "cpu") == (
        "certified on CPU only, 1 host, newest 2026-11-20 (not yet on any GPU)"
    )
    # A CPU recipe: passes count as CPU passes whatever GPU the host had.
    gpu_host = _spec(recipe="cpu", stack="torch2.13.0-cpu-py3.11", created=WHEN + timedelta(days=2))
    (tmp_path / "gpu-host.json").write_text(json.dumps(_records(gpu_host)[0]))
    records = read_evidence([tmp_path], NAMES).records
    assert certified_on(records, "cpu", gpu=False) == (
        "certified on CPU only, 2 hosts, newest 2026-11-22"
    )
    assert certified_on(records, "cpu").startswith("certified on AMD Radeon RX 6700 XT")
    assert certified_on(records, "gfx1010") == (
        "not yet certified on any GPU (1 run on record, none passed)"
    )


def test_show_says_where_the_recipe_was_certified(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", "cpu"]) == 0
    assert "Evidence: not yet certified on any GPU" in capsys.readouterr().out
    cpu = _spec(
        vendor="none",
        arch=None,
        product="",
        driver="",
        recipe="cpu",
        stack="torch2.13.0-cpu-py3.11",
    )
    record(make_report(cpu).to_dict())
    assert main(["show", "cpu", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["certified_on"].startswith("certified on CPU only, 1 host")


def test_a_report_gpu_without_pci_id_keeps_its_json_shape() -> None:
    assert list(ReportGpu("x", "gfx1031", "amd").to_dict()) == ["name", "arch", "vendor"]
    data = sanitized_report(make_report(GPU).to_dict(), NAMES)
    assert "id" not in data["host"]


# --------------------------------------------------------------------------- registry


class _Registry:
    """A tiny HTTP API v2 on loopback: an index -> an image manifest -> a config blob;
    every request is recorded (a layer blob is never asked for)."""

    def __init__(self, labels: dict[str, str], *, corrupt: bool = False) -> None:
        config = json.dumps({"config": {"Labels": labels}}).encode()
        self.config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
        if corrupt:
            config = config.replace(b"}", b" }", 1)
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"digest": self.config_digest, "size": len(config)},
                "layers": [{"digest": "sha256:" + "9" * 64, "size": 10**9}],
            }
        ).encode()
        manifest_digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
        index = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.index.v1+json",
                "manifests": [
                    {
                        "digest": "sha256:" + "8" * 64,
                        "platform": {"os": "linux", "architecture": "arm64"},
                    },
                    {
                        "digest": manifest_digest,
                        "platform": {"os": "linux", "architecture": "amd64"},
                    },
                ],
            }
        ).encode()
        self.paths = {
            "/v2/team/cpu/manifests/v1": index,
            f"/v2/team/cpu/manifests/{manifest_digest}": manifest,
            f"/v2/team/cpu/blobs/{self.config_digest}": config,
        }
        self.requests: list[str] = []
        self.auth: list[str] = []
        self.bearer = False
        self.redirect_blobs = False


@pytest.fixture
def registry() -> Iterator[tuple[str, _Registry]]:
    state = _Registry({"io.envforge.certificate": '{"x": 1}', "other": "y"})
    holder: dict[str, _Registry] = {"r": state}

    class Registry(Handler):
        def do_GET(self) -> None:
            current = holder["r"]
            current.requests.append(self.path)
            current.auth.append(self.headers.get("Authorization") or "")
            if self.path.startswith("/token"):
                self.send(200, json.dumps({"token": "tok"}).encode())
                return
            if self.path.startswith("/storage/"):  # "another host": localhost, not 127.0.0.1
                body = current.paths.get("/v2/team/cpu/blobs/" + self.path.split("/")[-1])
                self.send(200 if body else 404, body or b"{}")
                return
            if current.bearer and self.headers.get("Authorization") != "Bearer tok":
                realm = f"http://127.0.0.1:{self.port}/token"
                self.send(
                    401, b"{}", {"WWW-Authenticate": f'Bearer realm="{realm}",service="test"'}
                )
                return
            if current.redirect_blobs and "/blobs/" in self.path:
                location = f"http://localhost:{self.port}/storage/{self.path.split('/')[-1]}"
                self.send(307, b"", {"Location": location})
                return
            body = current.paths.get(self.path)
            self.send(200 if body is not None else 404, body or b"{}")

    with serving(Registry) as served:
        yield served.host, state


def test_labels_come_from_the_config_blob_without_any_layer(
    registry: tuple[str, _Registry],
) -> None:
    host, state = registry
    labels = image_labels(f"{host}/team/cpu:v1")
    assert labels == {"io.envforge.certificate": '{"x": 1}', "other": "y"}
    assert len(state.requests) == 3
    assert not any("9999" in r for r in state.requests)  # the layer was never fetched
    with pytest.raises(InvalidInput, match="HTTP 404"):
        image_labels(f"{host}/team/cpu:missing")


def test_a_token_is_fetched_and_not_sent_to_another_host_on_redirect(
    registry: tuple[str, _Registry], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A blob redirected to another (allowed) host gets no token. Without
    ENVFORGE_ALLOW_HOSTS the redirect is refused (plain http never leaves the registry's
    host: tests/unit/core/test_net_redirects.py)."""
    host, state = registry
    state.bearer = True
    state.redirect_blobs = True
    monkeypatch.setenv("ENVFORGE_ALLOW_HOSTS", f"http://localhost:{host.rsplit(':', 1)[1]}")
    labels = image_labels(f"{host}/team/cpu:v1")
    assert labels["other"] == "y"
    assert any(p.startswith("/token") for p in state.requests)
    storage = [a for p, a in zip(state.requests, state.auth) if p.startswith("/storage/")]
    assert storage == [""]  # the redirected blob request carried no token
    manifests = [a for p, a in zip(state.requests, state.auth) if "/manifests/" in p]
    assert "Bearer tok" in manifests


def test_a_config_blob_that_does_not_match_its_digest_is_refused(
    registry: tuple[str, _Registry],
) -> None:
    host, state = registry
    bad = _Registry({"a": "b"}, corrupt=True)
    state.paths.clear()
    state.paths.update(bad.paths)
    with pytest.raises(Unavailable, match="does not match its digest"):
        image_labels(f"{host}/team/cpu:v1")


def test_parse_ref_splits_host_repository_and_reference() -> None:
    assert parse_ref("127.0.0.1:5000/team/cpu:tag") == parse_ref("127.0.0.1:5000/team/cpu:tag")
    ref = parse_ref("127.0.0.1:5000/team/cpu@sha256:" + "a" * 64)
    assert (ref.host, ref.repository, ref.reference) == (
        "127.0.0.1:5000",
        "team/cpu",
        "sha256:" + "a" * 64,
    )
    assert ref.base.startswith("http://127.0.0.1:5000/v2/")
    hub = parse_ref("ubuntu")
    assert (hub.repository, hub.reference) == ("library/ubuntu", "latest")
    assert parse_ref("registry.example:443/a/b:1").base.startswith("https://")
    with pytest.raises(InvalidInput):
        parse_ref("Not A Ref")


def test_probe_report_keeps_the_run_in_the_store(
    tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real ``probe --report`` (this interpreter, quick level): the run is kept in the
    store with its host facts; the interpreter's path and the environment are not."""
    code = main(
        ["probe", "--level", "quick", "--report", str(tmp_path / "r"), "--step-timeout", "120"]
    )
    capsys.readouterr()
    assert code in (0, 1)
    (stored,) = stored_texts(home)
    data = json.loads(stored)
    assert data["schema"] == "envforge.probe/1"
    assert "/" not in data["environment"]["target"]
    assert set(data["environment"]["snapshot"]) <= {
        "python",
        "implementation",
        "numpy",
        "torch",
        "hip",
        "cuda",
        "git",
        "arch_flags",
        "cudnn",
    }
    assert data["host"]["kernel"].startswith("Linux")
    (kept,) = read_store().records
    assert kept.kind == "probe"
    assert kept.envforge_version


def test_the_redactor_says_when_a_document_may_change() -> None:
    assert not NAMES.may_change('{"detail":"failed in /opt/x.py","host":"bob-ws"}')
    for text in ('{"d":"/home/bob/x"}', '{"d":"C:\\\\Users\\\\bob"}', '{"d":"on alice-ws"}'):
        assert NAMES.may_change(text), text
    # a name JSON writes escaped (non-ASCII, a quote): the text cannot tell, so it may
    assert Redactor(("zoë-ws",)).may_change("{}")
    assert Redactor(('ali"ce',)).may_change("{}")


def test_a_stored_report_is_redacted_whatever_its_names_look_like() -> None:
    """The store skips the redaction walk only where nothing can change: a host name
    JSON writes escaped is still found, and a clean report is kept as it is."""
    data = make_report(GPU).to_dict()
    data["steps"][0]["detail"] = "failed on zoë-ws in /opt/x.py"
    kept = sanitized_report(data, Redactor(("zoë-ws",)))
    assert "zoë-ws" not in json.dumps(kept, ensure_ascii=False)
    assert kept["steps"][0]["detail"] == "failed on <redacted> in /opt/x.py"
    clean = make_report(GPU).to_dict()
    assert sanitized_report(clean, NAMES) == sanitized_report(clean, Redactor(("zz-nowhere",)))
    named = sanitized_report(_named_report(), NAMES)
    assert "alice" not in json.dumps(named).replace("<redacted>", "")


def test_show_reads_files_in_with_this_hosts_names_read_only_then(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``show``'s "certified on" syncs the store's folders with this host's redactor, whose
    names are read only when a folder is read (so that ``show`` loads no ``socket``
    otherwise)."""
    asked: list[str] = []

    def hostname() -> str:
        asked.append("host")
        return "alice-ws.lab"

    monkeypatch.setattr(socket, "gethostname", hostname)
    monkeypatch.setattr(getpass, "getuser", lambda: "carol")
    redacted: list[str] = []
    sync = evidence_db.sync_folder

    def spy(conn: Any, folder: Path, redact: Any, **kwargs: Any) -> Any:
        redacted.append(redact("carol ran it on alice-ws"))
        return sync(conn, folder, redact, **kwargs)

    monkeypatch.setattr(evidence_db, "sync_folder", spy)
    assert local_store.store_certified_on("gfx1031").startswith("not yet certified")
    assert (asked, redacted) == ([], [])  # no folder to read: no names read
    (home / "certificates").mkdir(parents=True)
    (home / "certificates" / "c.json").write_text(json.dumps(make_certificate(GPU)))
    assert local_store.store_certified_on("gfx1031").startswith("certified on AMD")
    assert redacted == ["<redacted> ran it on <redacted>"]
    assert asked == ["host"]
