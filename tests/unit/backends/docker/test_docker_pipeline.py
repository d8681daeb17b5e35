"""The Docker backend's render -> context -> build -> certify -> tag pipeline, on the fake
engine with a fake probe (no containers run), and the one shell routing function."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from envforge import backends
from envforge.backends import docker
from envforge.container.refs import CERTIFICATE_LABEL, certified_ref
from envforge.errors import InvalidInput
from envforge.probe.report import ProbeReport, Status, StepResult
from envforge.probe.runner import ProbeListener, ProbeTarget
from envforge.probe.spec import ProbeSpec
from envforge.publish.certificate import Certificate
from tests.helpers.fake_backend import FakeBackend
from tests.helpers.fake_engine import FakeEngine, image_attrs
from tests.helpers.recipes import make_recipe

CANDIDATE = "sha256:" + "c" * 64
RECIPE = make_recipe()
CERTIFIED = certified_ref(RECIPE.name, RECIPE.stack_tag)


def _engine() -> FakeEngine:
    engine = FakeEngine()
    engine.api.build_chunks = [
        {"stream": "Step 1/2 : FROM base\n"},
        {"stream": " ---> Using cache\n"},
        {"stream": "Step 2/2 : RUN make\n"},
        {"aux": {"ID": CANDIDATE}},
        {"stream": "Successfully built cccc\n"},
    ]
    engine.images.add(image_attrs(CANDIDATE))
    return engine


class FakeProbe:
    """Stands in for ``run_probe``: every step ends with ``status``; records the target."""

    def __init__(self, status: Status = "pass") -> None:
        self.status = status
        self.targets: list[str] = []

    def __call__(
        self, spec: ProbeSpec, target: ProbeTarget, listener: ProbeListener | None
    ) -> ProbeReport:
        self.targets.append(target.description)
        steps = [StepResult(step, self.status, 0.1, "").to_dict() for step in spec.steps]
        return ProbeReport.from_dict(
            {
                "steps": steps,
                "level": spec.level,
                "recipe": {"name": spec.recipe_name, "hash": spec.recipe_hash},
                "environment": {"target": target.description},
                "host": {"kernel": "test", "machine": "x86_64"},
                "envforge_version": "test",
                "created": "2026-01-01T00:00:00Z",
            }
        )


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private certificate store."""
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_build_hands_the_platform_to_the_engine() -> None:
    """``build --platform linux/arm64``: the classic builder's request names it (the
    Dockerfile's FROM too); without it the engine builds for its own platform."""
    engine = _engine()
    docker.build(RECIPE, docker.DockerOptions(certify=False, platform="linux/arm64"), client=engine)
    assert engine.api.builds[0]["platform"] == "linux/arm64"
    docker.build(RECIPE, docker.DockerOptions(certify=False), client=engine)
    assert "platform" not in engine.api.builds[1]


def test_build_without_certify_tags_the_candidate_only() -> None:
    engine = _engine()
    said: list[str] = []
    options = docker.DockerOptions(certify=False, tags=("mine:1",), say=said.append)
    result = docker.build(RECIPE, options, client=engine)
    assert result.image_id == CANDIDATE
    assert result.certification is None
    assert not result.certified
    assert engine.api.tags == [(CANDIDATE, "mine", "1")]
    assert engine.api.builds[0]["dockerfile"] == "Dockerfile"
    assert engine.api.builds[0]["nocache"] is False
    data = result.to_dict()
    assert data["certified"] is False
    assert data["tags"] == ["mine:1"]
    assert (data["steps"], data["steps_cached"], data["steps_rebuilt"]) == (2, 1, 1)
    assert said[0] == f"building cpu ({RECIPE.stack_tag}) from {RECIPE.base_image}"
    assert said[1].startswith(f"built {CANDIDATE[:19]} in ")
    assert said[1].endswith("(1 of 2 steps from cache)")


def test_no_certify_refuses_a_certified_namespace_tag_before_building() -> None:
    engine = _engine()
    options = docker.DockerOptions(certify=False, tags=("envforge/cpu:mine",))
    with pytest.raises(InvalidInput, match="--no-certify certifies nothing"):
        docker.build(RECIPE, options, client=engine)
    assert engine.api.builds == []


def test_build_certifies_labels_and_tags_on_a_pass(tmp_path: Path) -> None:
    engine = _engine()
    probe = FakeProbe("pass")
    options = docker.DockerOptions(tags=("extra:1",), report_dir=tmp_path / "reports")
    result = docker.build(RECIPE, options, client=engine, prober=probe)
    assert result.certified
    assert probe.targets == [f"docker image {CANDIDATE}"]
    assert result.certification is not None
    labelled = result.certification.outcome.certified_image
    assert labelled is not None
    assert labelled != CANDIDATE
    # The certified tag and the extra tag name the labelled image, never the candidate.
    repo, tag = CERTIFIED.split(":")
    assert engine.api.tags == [(labelled, repo, tag), (labelled, "extra", "1")]
    label = engine.images.get(CERTIFIED).attrs["Config"]["Labels"][CERTIFICATE_LABEL]
    cert = Certificate.from_json(label)
    assert cert.passed
    assert cert.recipe_name == "cpu"
    assert cert.layers == tuple(image_attrs(CANDIDATE)["RootFS"]["Layers"])
    assert result.certification.outcome.stored_at.is_file()
    data = result.to_dict()
    assert data["certified"] is True
    assert data["tags"] == [CERTIFIED, "extra:1"]
    assert data["certificate"] == cert.digest
    assert sorted(p.name for p in (tmp_path / "reports").iterdir()) == [
        "certificate.json",
        "probe.json",
        "probe.junit.xml",
    ]


def test_a_failed_probe_tags_nothing_and_names_the_step() -> None:
    engine = _engine()
    result = docker.build(RECIPE, docker.DockerOptions(), client=engine, prober=FakeProbe("hang"))
    assert not result.certified
    assert engine.api.tags == []
    assert result.certification is not None
    assert result.certification.outcome.certified_image is None
    assert result.certification.outcome.stored_at.is_file()  # the failure is recorded too
    data = result.to_dict()
    assert (data["certified"], data["status"], data["tags"]) == (False, "fail", [])
    error = result.certification.failure()
    assert error is not None
    assert error.message.startswith("certification of cpu failed at step ")
    assert error.message.endswith(f"{CERTIFIED} was not tagged")


def test_certify_by_recipe_needs_the_certified_image() -> None:
    with pytest.raises(InvalidInput, match=f"no certified image {CERTIFIED}"):
        docker.certify(RECIPE, docker.DockerOptions(), client=FakeEngine(), prober=FakeProbe())


def test_certify_an_image_by_tag_retags_it() -> None:
    engine = _engine()
    engine.images.add(image_attrs(CANDIDATE), "team/cpu:dev")
    result = docker.certify(
        RECIPE,
        docker.DockerOptions(),
        image="team/cpu:dev",
        retag=docker.retag_for("team/cpu:dev"),
        client=engine,
        prober=FakeProbe(),
    )
    assert result.certified
    labelled = result.outcome.certified_image
    assert engine.api.tags[-1] == (labelled, "team/cpu", "dev")
    assert docker.retag_for(CANDIDATE) == []


GPU = make_recipe(name="gfx1030", vendor="amd", arch="gfx1030")


def test_shell_falls_back_when_the_quick_check_fails() -> None:
    backend = FakeBackend("quick probe: device: no-device")
    said: list[str] = []
    code = backends.shell(
        backend, GPU, ["true"], backends.Options(), fallback=RECIPE, say=said.append
    )
    assert code == 3
    assert backend.ran == [("cpu", ("true",))]
    assert backend.step_timeouts == [backends.FALLBACK_STEP_TIMEOUT]
    assert said == [
        "gfx1030 cannot be used here: quick probe: device: no-device",
        "falling back to cpu",
    ]


def test_shell_stays_on_a_usable_gpu_and_never_checks_without_fallback() -> None:
    backend = FakeBackend(None)
    said: list[str] = []
    options = backends.Options()
    assert backends.shell(backend, GPU, [], options, fallback=RECIPE, say=said.append) == 3
    broken = FakeBackend("would fall back")
    assert backends.shell(broken, GPU, [], backends.Options(), say=said.append) == 3
    assert backend.ran == [("gfx1030", ())]
    assert broken.ran == [("gfx1030", ())]
    assert said == []


def test_both_backends_are_registered() -> None:
    from envforge.backends import venv

    assert dict(backends.BACKENDS) == {"docker": docker, "venv": venv}


def test_a_backend_is_imported_when_first_looked_up() -> None:
    code = (
        "import sys\n"
        "from envforge.backends import BACKENDS\n"
        "before = sorted(m for m in sys.modules if m.startswith('envforge.backends.'))\n"
        "BACKENDS['docker'].describe\n"
        "after = 'envforge.backends.docker' in sys.modules\n"
        "sdk = 'envforge.backends.docker.pipeline' in sys.modules or 'docker' in sys.modules\n"
        "print(before, after, sdk)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["['envforge.backends.base']", "True", "False"]
