"""Publish refusals, verify and build-output parsing against a fake engine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envforge.backends.docker import push as pub
from envforge.backends.docker.engine import connect
from envforge.backends.docker.images import assemble_context, build_image
from envforge.container.refs import CERTIFICATE_LABEL, ImageInfo, bound_config
from envforge.errors import BuildFailed, CertificationFailed, PublishRefused, Unavailable
from envforge.publish.certificate import Certificate, CertificateStore, issue
from tests.helpers.fake_engine import FakeEngine
from tests.helpers.recipes import make_recipe

RECIPE = make_recipe()
REF = "envforge/cpu:torch2.13.0-cpu-py3.11"
LAYERS = ["sha256:" + "a" * 64, "sha256:" + "b" * 64]
CONFIG = {"Env": ["PATH=/opt/venv/bin:/usr/bin"], "Cmd": ["bash"]}


def _attrs(layers: list[str], config: dict[str, Any], label: str | None) -> dict[str, Any]:
    labels = {CERTIFICATE_LABEL: label} if label is not None else {}
    return {
        "Id": "sha256:" + "1" * 64,
        "RootFS": {"Layers": layers},
        "Config": {**config, "Labels": labels},
        "RepoTags": [REF],
    }


def _cert(status: str = "pass", *, recipe_hash: str | None = None, now: float = 1.0) -> Certificate:
    return issue(
        report={"status": status, "steps": [{"name": "matmul", "status": status}]},
        recipe_name="cpu",
        recipe_hash=recipe_hash or RECIPE.hash,
        stack_tag=RECIPE.stack_tag,
        layers=LAYERS,
        config=bound_config(CONFIG),
        candidate_id="sha256:" + "2" * 64,
        now=now,
    )


@pytest.fixture
def store(tmp_path: Path) -> CertificateStore:
    return CertificateStore(tmp_path / "certs")


def _client_with(label: str | None, layers: list[str] = LAYERS) -> FakeEngine:
    client = FakeEngine()
    client.images.by_ref[REF] = _attrs(layers, CONFIG, label)
    return client


def test_publish_pushes_and_reports_digest(store: CertificateStore) -> None:
    cert = _cert()
    store.save(cert)
    client = _client_with(cert.to_json())
    result = pub.publish(client, RECIPE, "127.0.0.1:5000/team", store=store)
    assert result.ref == "127.0.0.1:5000/team/cpu:torch2.13.0-cpu-py3.11"
    assert result.digest == "sha256:" + "9" * 64
    assert result.pinned_ref == "127.0.0.1:5000/team/cpu@sha256:" + "9" * 64
    assert result.certificate == cert.digest
    assert client.api.tags == [("sha256:" + "1" * 64, "127.0.0.1:5000/team/cpu", RECIPE.stack_tag)]
    assert client.api.pushed == [("127.0.0.1:5000/team/cpu", RECIPE.stack_tag)]


def _refusal(client: FakeEngine, store: CertificateStore) -> str:
    with pytest.raises(PublishRefused) as info:
        pub.publish(client, RECIPE, "127.0.0.1:5000", store=store)
    assert client.api.pushed == []  # nothing left the host
    return info.value.message


def test_refused_without_certified_image(store: CertificateStore) -> None:
    assert "no certified image" in _refusal(FakeEngine(), store)


def test_refused_without_label(store: CertificateStore) -> None:
    assert "carries no certificate" in _refusal(_client_with(None), store)


def test_refused_when_label_was_edited(store: CertificateStore) -> None:
    data = json.loads(_cert().to_json())
    data["binding"]["layers"] = LAYERS[:1]
    assert "altered" in _refusal(_client_with(json.dumps(data)), store)


def test_refused_when_content_differs(store: CertificateStore) -> None:
    cert = _cert()
    store.save(cert)
    client = _client_with(cert.to_json(), layers=[*LAYERS, "sha256:" + "c" * 64])
    assert "content differs from certificate" in _refusal(client, store)


def test_refused_when_probe_failed(store: CertificateStore) -> None:
    cert = _cert("fail")
    store.save(cert)
    assert "failed probe" in _refusal(_client_with(cert.to_json()), store)


def test_refused_when_not_in_local_store(store: CertificateStore) -> None:
    assert "no certificate for its content" in _refusal(_client_with(_cert().to_json()), store)


def test_refused_when_latest_local_verdict_failed(store: CertificateStore) -> None:
    good = _cert(now=1.0)
    store.save(good)
    store.save(_cert("fail", now=2.0))
    assert "latest probe" in _refusal(_client_with(good.to_json()), store)


def test_refused_when_recipe_changed(store: CertificateStore) -> None:
    cert = _cert(recipe_hash="sha256:" + "0" * 64)
    store.save(cert)
    assert "another version of recipe" in _refusal(_client_with(cert.to_json()), store)


def test_verify_local_passes_and_fails() -> None:
    cert = _cert()
    ok = ImageInfo(
        id="x",
        layers=tuple(LAYERS),
        tags=(),
        labels={CERTIFICATE_LABEL: cert.to_json()},
        config=CONFIG,
    )
    assert pub.verify_local(ok, "r").certificate.digest == cert.digest
    modified = ImageInfo(
        id="y", layers=(*LAYERS, "sha256:" + "c" * 64), tags=(), labels=ok.labels, config=CONFIG
    )
    with pytest.raises(CertificationFailed, match="content differs from certificate"):
        pub.verify_local(modified, "r")
    bare = ImageInfo(id="z", layers=tuple(LAYERS), tags=(), labels={}, config=CONFIG)
    with pytest.raises(CertificationFailed, match="carries no certificate"):
        pub.verify_local(bare, "r")


def test_build_output_parsing_marks_cached_steps(tmp_path: Path) -> None:
    client = FakeEngine()
    client.api.build_chunks = [
        {"stream": "Step 1/3 : FROM base\n"},
        {"stream": " ---> 1234\n"},
        {"stream": "Step 2/3 : ENV A=1\n"},
        {"stream": " ---> Using cache\n"},
        {"stream": " ---> 5678\n"},
        {"stream": "Step 3/3 : RUN make\n"},
        {"stream": " ---> Running in abc\n"},
        {"aux": {"ID": "sha256:" + "f" * 64}},
        {"stream": "Successfully built ffff\n"},
    ]
    lines: list[str] = []
    result = build_image(client, tmp_path, on_line=lines.append)
    assert result.image_id == "sha256:" + "f" * 64
    assert [(s.number, s.cached) for s in result.steps] == [(1, False), (2, True), (3, False)]
    assert [s.instruction for s in result.rebuilt] == ["RUN make"]
    assert "Step 2/3 : ENV A=1" in lines


def test_the_classic_builders_colours_never_reach_the_display(tmp_path: Path) -> None:
    """The classic builder colours its lines: the display (and a log's heartbeat) gets the
    text, a stray control character its escape; the build's own log keeps them as sent."""
    client = FakeEngine()
    client.api.build_chunks = [
        {"stream": "Step 1/1 : RUN make \x1b[0m\n"},
        {"stream": "\x1b[31mwarning\x1b[0m: bell\x07\n"},
        {"aux": {"ID": "sha256:" + "f" * 64}},
    ]
    lines: list[str] = []
    result = build_image(client, tmp_path, on_line=lines.append)
    assert lines == ["Step 1/1 : RUN make ", "warning: bell\\x07"]
    assert result.log == ("Step 1/1 : RUN make \x1b[0m", "\x1b[31mwarning\x1b[0m: bell\x07")


def test_build_error_names_the_failing_step(tmp_path: Path) -> None:
    client = FakeEngine()
    client.api.build_chunks = [
        {"stream": "Step 1/2 : FROM base\n"},
        {"stream": "Step 2/2 : RUN pip install nothing-such\n"},
        {"error": "The command '/bin/sh -c pip install' returned a non-zero code: 1"},
    ]
    with pytest.raises(BuildFailed, match="step 2 \\(RUN pip install nothing-such\\) failed"):
        build_image(client, tmp_path)


def test_assemble_context_links_wheels_and_ca(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "x-1-py3-none-any.whl").write_bytes(b"w")
    (wheels / "notes.txt").write_text("no")
    ca = tmp_path / "ca.pem"
    ca.write_text("PEM")
    ctx = tmp_path / "ctx"
    assemble_context(ctx, "FROM x\n", wheelhouse=wheels, ca_bundle=ca)
    assert sorted(p.name for p in (ctx / "wheelhouse").iterdir()) == ["x-1-py3-none-any.whl"]
    assert (ctx / "ca-bundle.pem").read_text() == "PEM"
    assert (ctx / "Dockerfile").read_text() == "FROM x\n"


def test_no_engine_is_unavailable() -> None:
    with pytest.raises(Unavailable, match="no Docker engine answers"):
        connect({"DOCKER_HOST": "unix:///nonexistent/docker.sock"})


def test_another_recipes_failure_on_the_same_layers_does_not_block(
    store: CertificateStore,
) -> None:
    """Two recipes can build identical layers (only labels differ): verdicts are per recipe."""
    good = _cert(now=1.0)
    store.save(good)
    other = issue(
        report={"status": "fail", "steps": [{"name": "check:hang.py", "status": "hang"}]},
        recipe_name="hangcheck",
        recipe_hash="sha256:" + "7" * 64,
        stack_tag=RECIPE.stack_tag,
        layers=LAYERS,
        config=bound_config(CONFIG),
        candidate_id="sha256:" + "3" * 64,
        now=2.0,
    )
    store.save(other)
    client = _client_with(good.to_json())
    result = pub.publish(client, RECIPE, "127.0.0.1:5000", store=store)
    assert result.certificate == good.digest


def test_unpullable_base_image_hints_at_base_image_option(tmp_path: Path) -> None:
    client = FakeEngine()
    client.api.build_chunks = [
        {"stream": "Step 1/3 : FROM debian:bookworm-slim AS build\n"},
        {"error": 'Get "https://registry-1.docker.io/v2/": no such host'},
    ]
    with pytest.raises(Unavailable) as info:  # a network problem: exit 4 (issue 22 §9)
        build_image(client, tmp_path)
    assert info.value.hint is not None
    assert "--base-image" in info.value.hint
