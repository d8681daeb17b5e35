"""Issue 22 class 9: the smaller items (a failed publish leaves no local registry tag,
keys generate -o '' and --name with an ESC, an invalid --image reference, digests checked
for their format, BASH_ENV/ENV reserved (tests/hostile/), an unpullable base image is a
network problem)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from envforge.backends.docker import push as pub
from envforge.backends.docker.images import build_image, inspect_image, push
from envforge.backends.docker.images import pull as images_pull
from envforge.cli import main
from envforge.container.refs import CERTIFICATE_LABEL, bound_config, certified_ref
from envforge.errors import ExitCode, InvalidInput, PublishRefused, Unavailable
from envforge.publish.certificate import CertificateStore, issue
from tests.helpers.fake_engine import DEFAULT_CONFIG, DEFAULT_LAYERS, FakeEngine, image_attrs
from tests.helpers.recipes import make_recipe

RECIPE = make_recipe()
CERTIFIED = certified_ref(RECIPE.name, RECIPE.stack_tag)
TARGET = f"127.0.0.1:5000/team/{RECIPE.name}:{RECIPE.stack_tag}"


def _publishable(tmp_path: Path) -> tuple[FakeEngine, CertificateStore]:
    cert = issue(
        report={"status": "pass", "steps": [{"name": "a", "status": "pass"}]},
        recipe_name=RECIPE.name,
        recipe_hash=RECIPE.hash,
        stack_tag=RECIPE.stack_tag,
        layers=DEFAULT_LAYERS,
        config=bound_config(DEFAULT_CONFIG),
        candidate_id="sha256:" + "c" * 64,
    )
    store = CertificateStore(tmp_path / "certs")
    store.save(cert)
    engine = FakeEngine()
    engine.images.add(
        image_attrs("sha256:" + "1" * 64, labels={CERTIFICATE_LABEL: cert.to_json()}), CERTIFIED
    )
    return engine, store


def _failing_push(*_a: Any, **_k: Any) -> Iterator[dict[str, Any]]:
    yield {"status": "Pushing", "id": "abc"}
    yield {"error": "connection reset by peer"}


def test_a_failed_publish_leaves_no_local_registry_tag(tmp_path: Path) -> None:
    engine, store = _publishable(tmp_path)
    engine.api.push = _failing_push  # type: ignore[method-assign]
    with pytest.raises(PublishRefused, match="connection reset"):
        pub.publish(engine, RECIPE, "127.0.0.1:5000/team", store=store)
    assert engine.api.removed == [TARGET]
    assert inspect_image(engine, TARGET) is None
    assert inspect_image(engine, CERTIFIED) is not None  # the certified image stays


def test_a_failed_publish_puts_back_an_earlier_local_registry_tag(tmp_path: Path) -> None:
    engine, store = _publishable(tmp_path)
    engine.images.add(image_attrs("sha256:" + "0" * 64), TARGET)  # an earlier publish
    engine.api.push = _failing_push  # type: ignore[method-assign]
    with pytest.raises(PublishRefused):
        pub.publish(engine, RECIPE, "127.0.0.1:5000/team", store=store)
    info = inspect_image(engine, TARGET)
    assert info is not None
    assert info.id == "sha256:" + "0" * 64
    assert engine.api.removed == []


def test_a_malformed_pushed_digest_is_refused() -> None:
    engine = FakeEngine()

    def odd(*_a: Any, **_k: Any) -> Iterator[dict[str, Any]]:
        yield {"aux": {"Tag": "t", "Digest": "sha256:\x1b[2J../../x", "Size": 1}}

    engine.api.push = odd  # type: ignore[method-assign]
    with pytest.raises(PublishRefused, match="malformed digest") as info:
        push(engine, TARGET)
    assert "\x1b" not in info.value.one_line()


def test_an_invalid_image_reference_is_exit_2() -> None:
    engine = FakeEngine()

    def get(name: str) -> Any:
        response = type("R", (), {"status_code": 400, "reason": "Bad Request", "url": ""})()
        raise docker.errors.APIError(
            "400 Client Error",
            response=response,
            explanation=f"no such image: {name}: invalid reference format",
        )

    engine.images.get = get  # type: ignore[method-assign]
    with pytest.raises(InvalidInput, match="is not an image reference") as info:
        inspect_image(engine, "Not A Ref!!")
    assert info.value.exit_code is ExitCode.INVALID_INPUT


@pytest.mark.parametrize(
    "ref",
    [
        "127.0.0.1:5000/team/cpu@sha256:zz",
        "127.0.0.1:5000/team/cpu@md5:" + "a" * 32,
        "127.0.0.1:5000/team/cpu@sha256:" + "A" * 64,
        "127.0.0.1:5000/team/cpu@",
    ],
)
def test_a_malformed_digest_is_exit_2_before_the_engine_is_asked(
    ref: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`verify --pull` and `pull` sent it to the engine, whose 400 was exit 4 (a network
    problem); `verify` (remote) already refused it."""
    from envforge.backends.docker import engine as engine_module

    engine = FakeEngine()
    monkeypatch.setattr(engine_module, "connect", lambda *_a, **_k: engine)
    for argv in (["verify", ref, "--pull"], ["pull", ref], ["verify", ref]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "is not a sha256 digest" in err or "is not an image reference" in err
        assert len(err.strip().splitlines()) == 1
    assert engine.api.pulled == []


def test_a_reference_the_engine_cannot_parse_is_exit_2_on_pull() -> None:
    engine = FakeEngine()

    def pull(repository: str, tag: str | None = None, **_kw: object) -> object:
        response = type("R", (), {"status_code": 400, "reason": "Bad Request", "url": ""})()
        raise docker.errors.APIError(
            "400 Client Error", response=response, explanation="invalid reference format"
        )

    engine.api.pull = pull  # type: ignore[method-assign,assignment]
    with pytest.raises(InvalidInput, match="is not an image reference"):
        images_pull(engine, "Team/CPU:x")


def test_a_base_image_that_cannot_be_pulled_is_exit_4(tmp_path: Path) -> None:
    engine = FakeEngine()
    engine.api.build_chunks = [
        {"stream": "Step 1/2 : FROM 127.0.0.1:1/nope:t\n"},
        {"error": 'Get "http://127.0.0.1:1/v2/": dial tcp 127.0.0.1:1: connect: refused'},
    ]
    failed = re.escape("step 1 (FROM 127.0.0.1:1/nope:t) failed")
    with pytest.raises(Unavailable, match=failed) as info:
        build_image(engine, tmp_path)
    assert info.value.exit_code is ExitCode.UNAVAILABLE
    assert info.value.hint is not None
    assert "--base-image" in info.value.hint


def test_keys_generate_refuses_an_empty_folder_and_a_name_with_an_escape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["keys", "generate", "-o", ""]) == 2
    assert "-o is empty" in capsys.readouterr().err
    assert main(["keys", "generate", "-o", "k", "--name", "ci\x1b]0;owned\x07"]) == 2
    err = capsys.readouterr().err
    assert "control character" in err
    assert "\x1b" not in err
    assert os.listdir(tmp_path) == []  # nothing written anywhere
    assert main(["keys", "generate", "-o", "k", "--name", "team\tci"]) == 0
    assert sorted(os.listdir(tmp_path / "k")) == ["envforge.key", "envforge.pub"]
