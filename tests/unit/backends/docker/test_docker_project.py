"""A project's image on the Docker backend (issue 19 §3-§6, §8): the lock split for the
layers, the rendered project stage, the project's tag, its checks in certification (on
the fake engine with a fake probe), and the shell's refusal of another project's image."""

from __future__ import annotations

from pathlib import Path

import pytest

from envforge import lock
from envforge.backends import docker
from envforge.backends.docker import pipeline, projects
from envforge.backends.docker.projects import (
    image_problem,
    import_path,
    prepare,
    probe_for,
    project_ref,
    shell_for,
    split_project_lock,
)
from envforge.container.refs import ImageInfo, certified_ref
from envforge.errors import CertificationFailed, InvalidInput, ProjectError, Unavailable
from envforge.probe.report import ProbeReport, StepResult
from envforge.probe.runner import ProbeListener, ProbeTarget
from envforge.probe.spec import ProbeSpec
from envforge.project.model import Project
from envforge.project.read import load_project
from envforge.project.resolve import home_lock_file, lock_file, project_stack
from envforge.render import RenderOptions, render_dockerfile
from envforge.render.project import project_context
from envforge.stack import stack_of
from tests.helpers.fake_engine import FakeEngine, image_attrs
from tests.helpers.recipes import make_recipe

CANDIDATE = "sha256:" + "d" * 64
RECIPE = make_recipe(packages=("tqdm==4.67.1",))
H = "--hash=sha256:" + "a" * 64


def _lock_body(extra: str = "") -> str:
    return (
        f"filelock==3.20.0 \\\n    {H}\n    # via torch\n"
        f"numpy==2.3.5 \\\n    {H}\n    # via -r requirements.in\n"
        f"six==1.17.0 \\\n    {H}\n    # via -r requirements.in\n"
        f"torch==2.13.0 \\\n    {H}\n    # via -r requirements.in\n"
        f"tqdm==4.67.1 \\\n    {H}\n    # via -r requirements.in\n"
        f"typing-extensions==4.15.0 \\\n    {H}\n    # via\n    #   torch\n    #   tqdm\n" + extra
    )


def make_project(
    folder: Path,
    *,
    deps: str = '["six"]',
    checks: str = '["python -c pass"]',
    tool: str = "",
) -> Project:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(
        f'[project]\nname = "Demo_Proj"\nversion = "0.1"\ndependencies = {deps}\n'
        f'[tool.envforge]\nrecipe = "cpu"\nchecks = {checks}\n{tool}',
        encoding="utf-8",
    )
    pkg = folder / "src" / "demo_proj"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("VALUE = 1\n", encoding="utf-8")
    return load_project(folder)


def write_current_lock(project: Project, extra: str = "") -> Path:
    """The project's lock for RECIPE, current (its header digest matches the project)."""
    digest = lock.inputs_digest(RECIPE, project_stack(project, RECIPE), project.constraints)
    path = lock_file(project, RECIPE)
    path.write_text(
        f"# envforge-lock: recipe=cpu inputs={digest} python=3.11\n" + _lock_body(extra),
        encoding="utf-8",
    )
    return path


def test_the_project_lock_splits_into_torch_recipe_and_project_layers(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p")
    locked, project_lines = split_project_lock(write_current_lock(project), stack_of(RECIPE))
    names = [
        [line.split("==")[0] for line in part]
        for part in (locked.torch, locked.rest, project_lines)
    ]
    # typing-extensions is torch's (and tqdm's): in torch's layer; six only the project's
    assert names == [["filelock", "torch", "typing-extensions"], ["numpy", "tqdm"], ["six"]]
    assert all(H in line for line in (*locked.torch, *locked.rest, *project_lines))


def test_a_requirement_change_leaves_the_recipe_layers_and_adds_a_project_stage(
    tmp_path: Path,
) -> None:
    project = make_project(tmp_path / "p", tool='system_packages = ["ffmpeg"]\n')
    write_current_lock(project)
    said: list[str] = []
    kw = {"wheelhouse": None, "ca_bundle": None, "platform": None, "say": said.append}
    first = prepare(RECIPE, project, **kw)  # type: ignore[arg-type]
    options = RenderOptions(lock=first.locked, builder="buildkit")
    before = render_dockerfile(RECIPE, options, first.stack, project=first.layer)
    recipe_only = render_dockerfile(RECIPE, options, first.stack)

    changed = make_project(
        tmp_path / "p", deps='["six", "idna"]', tool='system_packages = ["ffmpeg"]\n'
    )
    write_current_lock(changed, extra=f"idna==3.11 \\\n    {H}\n    # via -r requirements.in\n")
    second = prepare(RECIPE, changed, **kw)  # type: ignore[arg-type]
    after = render_dockerfile(RECIPE, options, second.stack, project=second.layer)
    assert said == []  # the lock was current: nothing resolved

    # everything up to the project stage is the recipe's Dockerfile, byte for byte
    cut = before.index('# Stage "project"')
    assert before[:cut] == after[: after.index('# Stage "project"')]
    assert recipe_only.startswith(before[:cut].rstrip("\n"))
    stage = after[after.index("FROM build AS project") : after.rindex("FROM ")]
    # the project's system packages come before its Python packages there too
    assert stage.index("--no-install-recommends ffmpeg") < stage.index("project.lock.txt")
    assert "'idna==3.11 " in stage
    assert "'six==1.17.0 " in stage
    assert "--require-hashes --no-deps" in stage
    assert "'torch==" not in stage  # torch is never installed twice
    final = after[after.rindex("FROM ") :]
    # apt before the project's Python packages, both after the recipe's venv layers
    assert final.index("COPY --from=build") < final.index(
        "apt-get install -y --no-install-recommends ffmpeg"
    )
    assert final.index("ffmpeg") < final.index("COPY --from=project /opt/envforge-project")
    assert 'io.envforge.project-key="demo-proj-' in final


def test_a_project_needing_nothing_more_has_no_project_stage(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", deps="[]")
    path = write_current_lock(project)
    path.write_text(
        path.read_text(encoding="utf-8").replace(
            f"six==1.17.0 \\\n    {H}\n    # via -r requirements.in\n", ""
        ),
        encoding="utf-8",
    )
    built = prepare(
        RECIPE, project, wheelhouse=None, ca_bundle=None, platform=None, say=lambda _: None
    )
    text = render_dockerfile(
        RECIPE, RenderOptions(lock=built.locked), built.stack, project=built.layer
    )
    assert "AS project" not in text
    assert "COPY --from=project" not in text
    assert 'LABEL io.envforge.project="demo-proj"' in text


def test_each_project_folder_has_a_tag_of_its_own(tmp_path: Path) -> None:
    one = make_project(tmp_path / "a" / "p")
    two = make_project(tmp_path / "b" / "p")
    refs = {project_ref(RECIPE, one), project_ref(RECIPE, two)}
    assert len(refs) == 2
    assert certified_ref(RECIPE.name, RECIPE.stack_tag) not in refs
    for ref in refs:  # the project's name (as a repository may spell it) and the recipe
        repo, tag = ref.split(":")
        assert repo.startswith("envforge/demo-proj-")
        assert tag == f"cpu-{RECIPE.stack_tag}"


def test_the_project_is_importable_from_its_src_folder_or_its_root(tmp_path: Path) -> None:
    src = make_project(tmp_path / "src-layout")
    assert import_path(src, "/workspace") == "/workspace/src"
    probe = probe_for(src)  # certification: read-only at its own path and at /workspace
    assert probe.mounts == ((str(src.root), str(src.root)), (str(src.root), "/workspace"))
    assert probe.env["PYTHONPATH"] == "/workspace/src"
    assert probe.env["PYTHONPYCACHEPREFIX"].startswith("/tmp/")
    flat = tmp_path / "flat"
    (flat / "flat_pkg").mkdir(parents=True)
    (flat / "flat_pkg" / "__init__.py").write_text("", encoding="utf-8")
    (flat / "requirements.txt").write_text("six\n", encoding="utf-8")
    assert import_path(load_project(flat), "/workspace") == "/workspace"


def test_a_bad_check_or_system_package_stops_before_anything_is_resolved(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", checks='["missing.py"]')
    with pytest.raises(ProjectError, match=r"checks\[0\]: missing.py is not a file"):
        prepare(RECIPE, project, wheelhouse=None, ca_bundle=None, platform=None, say=lambda _: None)
    with pytest.raises(ProjectError, match=r"system_packages\[0\]: 'Bad Name' is not a Debian"):
        make_project(tmp_path / "q", tool='system_packages = ["Bad Name"]\n')
    with pytest.raises(InvalidInput, match="a project lock is resolved for linux/amd64"):
        prepare(
            RECIPE,
            make_project(tmp_path / "r"),
            wheelhouse=None,
            ca_bundle=None,
            platform="linux/arm64",
            say=lambda _: None,
        )


class StepProbe:
    """Stands in for ``run_probe``: steps starting with ``failing`` fail; records specs."""

    def __init__(self, failing: str | None = None) -> None:
        self.failing = failing
        self.specs: list[ProbeSpec] = []

    def __call__(
        self, spec: ProbeSpec, target: ProbeTarget, listener: ProbeListener | None
    ) -> ProbeReport:
        self.specs.append(spec)
        steps = [
            StepResult(
                s, "fail" if self.failing and s.startswith(self.failing) else "pass", 0.1, ""
            ).to_dict()
            for s in spec.steps
        ]
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


def _engine() -> FakeEngine:
    engine = FakeEngine()
    engine.api.build_chunks = [{"stream": "Step 1/1 : FROM base\n"}, {"aux": {"ID": CANDIDATE}}]
    engine.images.add(image_attrs(CANDIDATE))
    return engine


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENVFORGE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_the_project_image_is_certified_with_its_checks_and_tagged_for_the_project(
    tmp_path: Path,
) -> None:
    project = make_project(tmp_path / "p")
    write_current_lock(project)
    engine, probe = _engine(), StepProbe()
    result = docker.build(
        RECIPE, docker.DockerOptions(project=project), client=engine, prober=probe
    )
    assert result.certified
    steps = probe.specs[0].steps
    assert "check:import demo_proj" in steps
    assert "check:python -c pass" in steps
    ref = project_ref(RECIPE, project)
    repo, tag = ref.split(":")
    assert [(r, t) for _, r, t in engine.api.tags] == [(repo, tag)]  # never the recipe's tag
    assert result.to_dict()["tags"] == [ref]
    assert result.printed() == ref


def test_a_failing_check_fails_certification_naming_it_and_tags_nothing(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", checks='["python -c pass", "pytest -q"]')
    write_current_lock(project)
    engine = _engine()
    result = docker.build(
        RECIPE,
        docker.DockerOptions(project=project),
        client=engine,
        prober=StepProbe(failing="check:pytest"),
    )
    assert not result.certified
    assert engine.api.tags == []
    error = result.failure()
    assert error is not None
    assert error.exit_code == 1
    assert "at step check:pytest -q" in error.message
    assert error.message.endswith(f"{project_ref(RECIPE, project)} was not tagged")


def test_a_shell_refuses_another_projects_image_or_one_built_before_a_change(
    tmp_path: Path,
) -> None:
    project = make_project(tmp_path / "p")
    write_current_lock(project)
    built = prepare(
        RECIPE, project, wheelhouse=None, ca_bundle=None, platform=None, say=lambda _: None
    )
    labels = {
        "io.envforge.project-key": built.layer.key,
        "io.envforge.project-requirements": built.layer.requirements_digest,
        "io.envforge.project-checks": str(built.layer.checks_digest),
    }
    info = ImageInfo.from_attrs(image_attrs(CANDIDATE, labels=labels))
    ref = project_ref(RECIPE, project)
    assert image_problem(info, ref, project, RECIPE) is None
    env, mount = shell_for(info, ref, project, RECIPE, asked=False, say=lambda _: None)
    assert (env["PYTHONPATH"], mount) == ("/workspace/src", project.root)

    other = make_project(tmp_path / "other")
    with pytest.raises(CertificationFailed, match="is not an image of the project"):
        shell_for(info, ref, other, RECIPE, asked=False, say=lambda _: None)
    changed = make_project(tmp_path / "p", deps='["six", "idna"]')
    said: list[str] = []
    shell_for(info, ref, changed, RECIPE, asked=True, say=said.append)  # --image: a warning
    assert "the requirements of demo-proj changed" in said[0]
    assert "--project" in said[0]
    assert "--backend docker" in said[0]


def test_a_project_shell_without_the_projects_image_names_the_build_that_makes_it(
    tmp_path: Path,
) -> None:
    project = make_project(tmp_path / "p")
    engine = FakeEngine()
    # the recipe's own certified image is there: it does not serve the project
    engine.images.add(image_attrs(CANDIDATE), certified_ref(RECIPE.name, RECIPE.stack_tag))
    with pytest.raises(Unavailable) as caught:
        docker.run(
            RECIPE, ["python", "train.py"], docker.DockerOptions(project=project), client=engine
        )
    ref = project_ref(RECIPE, project)
    assert caught.value.message == f"no certified image {ref} on this engine"
    assert caught.value.hint == (
        f"envforge build cpu --project {project.root} --backend docker (or pass --image REF)"
    )


def test_a_lock_line_with_many_hashes_renders(tmp_path: Path) -> None:
    """A package with wheels for many platforms has a lock line of several kB (tomli's:
    5 kB); the project stage carries it as the recipe's lock steps do."""
    project = make_project(tmp_path / "p")
    many = " \\\n    ".join(f"--hash=sha256:{i:064x}" for i in range(80))
    write_current_lock(
        project, extra=f"tomli==2.3.0 \\\n    {many}\n    # via -r requirements.in\n"
    )
    built = prepare(
        RECIPE, project, wheelhouse=None, ca_bundle=None, platform=None, say=lambda _: None
    )
    (line,) = [x for x in built.layer.lines if x.startswith("tomli")]
    assert len(line) > 5000
    text = render_dockerfile(
        RECIPE, RenderOptions(lock=built.locked), built.stack, project=built.layer
    )
    assert f"'{line}'" in text


def test_the_quick_probe_before_a_fallback_looks_at_the_projects_image(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = make_project(tmp_path / "p")
    engine = FakeEngine()
    engine.images.add(image_attrs(CANDIDATE), certified_ref(RECIPE.name, RECIPE.stack_tag))
    monkeypatch.setattr(pipeline, "_connect", lambda _options: engine)
    problem = docker.check(RECIPE, docker.DockerOptions(project=project))
    assert problem == (
        f"no certified image {project_ref(RECIPE, project)} on this engine"
        f" (fix: envforge build cpu --project {project.root} --backend docker"
        " (or pass --image REF))"
    )


def test_the_projects_torchvision_goes_into_torchs_layer(tmp_path: Path) -> None:
    """Issue 26 §1: a project's torchvision is the stack's (pinned to the pairing, from the
    stack's index or the wheelhouse), so the image installs it in torch's layer."""
    project = make_project(tmp_path / "p", deps='["torch", "torchvision", "six"]')
    vision = project_stack(project, RECIPE).companions[0].requirement
    assert vision.startswith("torchvision==0.28.0")
    write_current_lock(
        project,
        f"{vision} \\\n    {H}\n    # via -r requirements.in\n"
        f"pillow==12.0.0 \\\n    {H}\n    # via torchvision\n",
    )
    built = prepare(
        RECIPE, project, wheelhouse=None, ca_bundle=None, platform=None, say=lambda _line: None
    )
    torch_layer = [line.split("==")[0] for line in built.locked.torch]
    assert "torchvision" in torch_layer
    assert "pillow" in torch_layer
    assert [line.split("==")[0] for line in built.layer.lines] == ["six"]


def test_a_wheelhouse_without_the_projects_torchvision_stops_before_the_lock(
    tmp_path: Path,
) -> None:
    project = make_project(tmp_path / "p", deps='["torch", "torchvision"]')
    recipe = make_recipe(torch="2.13.0", index="https://download.pytorch.org/whl/cpu")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    with pytest.raises(Unavailable, match=r"no wheel for torchvision==0\.28\.0\+cpu"):
        prepare(
            recipe,
            project,
            wheelhouse=wheels,
            ca_bundle=None,
            platform=None,
            say=lambda _line: None,
        )
    assert not lock_file(project, recipe).exists()


def test_an_image_certified_with_other_checks_is_not_the_projects_image(tmp_path: Path) -> None:
    """Issue 27 class 4 on Docker: the checks an image was certified with are a label of
    it; after a check is added, `shell` refuses the image and names the build."""
    project = make_project(tmp_path / "p")
    write_current_lock(project)
    built = prepare(
        RECIPE, project, wheelhouse=None, ca_bundle=None, platform=None, say=lambda _: None
    )
    assert built.layer.checks_digest is not None
    context = project_context(built.layer, RenderOptions(), stack_of(RECIPE))
    assert ("io.envforge.project-checks", f'"{built.layer.checks_digest}"') in {
        (label.key, label.value) for label in context.labels
    }
    labels = {
        "io.envforge.project-key": built.layer.key,
        "io.envforge.project-requirements": built.layer.requirements_digest,
        "io.envforge.project-checks": built.layer.checks_digest,
    }
    info = ImageInfo.from_attrs(image_attrs(CANDIDATE, labels=labels))
    ref = project_ref(RECIPE, project)
    assert image_problem(info, ref, project, RECIPE) is None
    more = make_project(tmp_path / "p", checks='["python -c pass", "python -c 1"]')
    problem = image_problem(info, ref, more, RECIPE)
    assert problem is not None
    assert "the checks of demo-proj changed" in problem


def test_a_lock_resolved_unasked_goes_under_envforge_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29 §6: a build that must resolve writes nothing into the project's folder;
    the lock goes under ENVFORGE_HOME keyed by the project, said once, and is found there
    next time. A lock the user put into the project (``lock --project``) is updated there."""
    project = make_project(tmp_path / "p")
    asked = lock_file(project, RECIPE)
    written: list[Path | None] = []

    def fake_write(project: Project, recipe: object, **kw: Path | None) -> lock.LockResult:
        out = kw["output"]
        assert out is not None
        written.append(out)
        body = write_current_lock(project).read_bytes()  # a current lock's text
        asked.unlink()
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(body)
        return lock.LockResult(path=out, count=6)

    monkeypatch.setattr(projects, "write_project_lock", fake_write)
    said: list[str] = []
    built = prepare(
        RECIPE, project, wheelhouse=None, ca_bundle=None, platform=None, say=said.append
    )
    kept = home_lock_file(project, RECIPE)
    assert written == [kept]
    assert built.lock_path == kept
    assert not asked.exists()
    assert sorted(p.name for p in project.root.iterdir()) == ["pyproject.toml", "src"]
    assert any(line.startswith(f"wrote {kept} (kept outside the project;") for line in said)
    said.clear()
    assert (
        prepare(
            RECIPE, project, wheelhouse=None, ca_bundle=None, platform=None, say=said.append
        ).lock_path
        == kept
    )  # current: found, nothing written
    assert written == [kept]
    assert not any("wrote" in line for line in said)

    asked.write_text("# envforge-lock: recipe=cpu inputs=sha256:old python=3.11\n")
    kept.unlink()
    prepare(RECIPE, project, wheelhouse=None, ca_bundle=None, platform=None, say=said.append)
    assert written[-1] == asked  # the user's own lock, stale: rewritten where it is
