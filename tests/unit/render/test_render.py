"""Rendering: torch requirement and index form, Dockerfile structure and layer order,
venv plan, refusals of what cannot be quoted."""

from __future__ import annotations

import dataclasses
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from envforge.errors import InvalidInput
from envforge.lock import LockedInstall
from envforge.recipe.load import load_recipe_file
from envforge.recipe.model import EnvVar, Recipe, Torch
from envforge.render import (
    RenderOptions,
    index_form,
    is_pytorch_index,
    plan_venv,
    render_dockerfile,
    torch_requirement,
)
from tests.helpers import paths
from tests.helpers.dockerfile_syntax import (
    Instruction,
    install_requirements,
    key_values,
    parse,
    shell_words,
    stages,
)

FIXTURES = paths.TESTS / "fixtures" / "recipes"


@pytest.fixture
def rocm() -> Recipe:
    return load_recipe_file(FIXTURES / "golden-rocm.yaml")


@pytest.fixture
def cpu() -> Recipe:
    return load_recipe_file(FIXTURES / "golden-cpu.yaml")


@pytest.fixture
def cuda() -> Recipe:
    return load_recipe_file(FIXTURES / "golden-cuda.yaml")


def keywords(text: str) -> list[str]:
    return [i.keyword for i in parse(text)]


def env_of(stage: list[Instruction]) -> dict[str, str]:
    out: dict[str, str] = {}
    for ins in stage:
        if ins.keyword == "ENV":
            out.update((k, v.text) for k, v in key_values(ins.args))
    return out


def labels_of(stage: list[Instruction]) -> dict[str, str]:
    out: dict[str, str] = {}
    for ins in stage:
        if ins.keyword == "LABEL":
            out.update((k, v.text) for k, v in key_values(ins.args))
    return out


# --------------------------------------------------------------------------- decisions


PT = "https://download.pytorch.org/whl"


@pytest.mark.parametrize(
    ("torch", "rocm", "cuda", "expected"),
    [
        (Torch("1.13.1", f"{PT}/rocm5.2"), "5.2", None, "torch==1.13.1+rocm5.2"),
        (Torch("2.4.1", f"{PT}/rocm6.1"), "6.1", None, "torch==2.4.1+rocm6.1"),
        (Torch("2.6.0", f"{PT}/rocm6.2.4"), "6.2.4", None, "torch==2.6.0+rocm6.2.4"),
        (Torch("2.7.0", f"{PT}/cu128/"), None, "12.8", "torch==2.7.0+cu128"),
        (Torch("2.13.0", f"{PT}/cpu"), None, None, "torch==2.13.0+cpu"),
        (Torch("2.13.0", "https://m.example/whl/nightly/cpu"), None, None, "torch==2.13.0+cpu"),
        (Torch("2.6.0", None), None, "12.6", "torch==2.6.0"),
        (Torch("2.6.0", "https://pypi.example/simple"), None, "12.6", "torch==2.6.0"),
        (Torch("2.11.0+rocm7.15", "https://r.example/"), "7.1", None, "torch==2.11.0+rocm7.15"),
    ],
)
def test_torch_requirement(
    cpu: Recipe, torch: Torch, rocm: str | None, cuda: str | None, expected: str
) -> None:
    recipe = dataclasses.replace(cpu, torch=torch, rocm=rocm, cuda=cuda)
    assert torch_requirement(recipe) == expected


def test_is_pytorch_index() -> None:
    assert is_pytorch_index("https://download.pytorch.org/whl/rocm5.4.2")
    assert is_pytorch_index("https://download.pytorch.org/whl/nightly/rocm7.2/")
    assert not is_pytorch_index("https://download.pytorch.org/whl/")
    assert not is_pytorch_index("https://rocm.example/whl-multi-arch/")
    assert not is_pytorch_index(None)


def test_index_form(rocm: Recipe, cpu: Recipe, cuda: Recipe) -> None:
    assert index_form(rocm) == "extra-index-url"  # 1.13: extra index + local version
    assert index_form(cpu) == "index-url"  # 2.0+: the variant index is the index
    assert index_form(cuda) is None  # default index


def test_index_form_refuses_a_bad_version(cpu: Recipe) -> None:
    bad = dataclasses.replace(cpu, torch=Torch("latest", "https://download.pytorch.org/whl/cpu"))
    with pytest.raises(InvalidInput, match=r"torch\.version"):
        index_form(bad)


# --------------------------------------------------------------------------- Dockerfile


def test_stages_and_layer_order(rocm: Recipe) -> None:
    torch_stage, build, final = stages(parse(render_dockerfile(rocm)))
    assert [i.keyword for i in torch_stage] == ["FROM", "RUN", "RUN", "ENV", "RUN", "RUN"]
    assert torch_stage[0].args == "ubuntu:22.04 AS torch"
    assert [i.keyword for i in build] == ["FROM", "RUN"]
    assert build[0].args == "torch AS build"
    # final: FROM, python, torch's venv, the rest's files, env (venv first, then one ENV
    # per recipe var), labels
    assert [i.keyword for i in final] == [
        "FROM",
        "RUN",
        "COPY",
        "COPY",
        "ENV",
        "ENV",
        "ENV",
        "ENV",
        "LABEL",
    ]
    assert final[0].args == "ubuntu:22.04"
    assert final[2].args == "--from=torch /opt/venv /opt/venv"
    assert final[3].args == "--from=build /opt/envforge-rest /opt/venv"
    # the python RUN is identical in both stages (so the final stage hits the cache)
    assert torch_stage[1].args == final[1].args
    assert "apt-get install" in torch_stage[1].args
    assert "rm -rf /var/lib/apt/lists/*" in torch_stage[1].args
    # uv first (pip where it cannot run), then torch in its own RUN, before the rest
    assert "uv==" in torch_stage[4].args
    assert "UV_PYTHON_DOWNLOADS=never" in torch_stage[3].args
    assert "torch==1.13.1+rocm5.2" in torch_stage[5].args
    assert "--compile-bytecode" in torch_stage[5].args
    assert "numpy" not in torch_stage[5].args
    assert "'numpy<2'" in build[1].args
    assert "pillow==10.4.0" in build[1].args
    assert "/opt/envforge-rest" in build[1].args


def test_torch_index_forms(rocm: Recipe, cpu: Recipe, cuda: Recipe) -> None:
    torch_run = stages(parse(render_dockerfile(rocm)))[0][-1].args
    assert "--extra-index-url https://download.pytorch.org/whl/rocm5.2 --" in torch_run
    torch_run = stages(parse(render_dockerfile(cpu)))[0][-1].args
    assert "--index-url https://download.pytorch.org/whl/cpu --" in torch_run
    torch_run = stages(parse(render_dockerfile(cuda)))[0][-1].args
    assert "index-url" not in torch_run
    # the torch family in one step: torch, its companion triton pin, the NumPy bound
    assert install_requirements(torch_run) == ["torch==2.6.0", "triton==3.2.0", "numpy>=2"]
    assert "--no-cache-dir" in torch_run


def test_pip_only_and_the_fallback_line(cpu: Recipe) -> None:
    uv_torch = stages(parse(render_dockerfile(cpu)))[0][-1].args
    assert "if [ -x /opt/envforge-uv/bin/uv ]; then" in uv_torch
    assert "echo 'envforge: installing with pip (uv is not available in this build)'" in uv_torch
    pip_stage = stages(parse(render_dockerfile(cpu, RenderOptions(installer="pip"))))[0]
    assert not any("uv==" in i.args for i in pip_stage)
    assert "envforge-uv" not in pip_stage[-1].args
    assert pip_stage[-1].args.startswith("set -eu;     /opt/venv/bin/python -m pip install")


def test_venv_first_on_path_and_env_literal(rocm: Recipe) -> None:
    final = stages(parse(render_dockerfile(rocm)))[-1]
    first_env = key_values(final[4].args)
    assert [(k, v.text, v.expansions) for k, v in first_env] == [
        ("VIRTUAL_ENV", "/opt/venv", ()),
        ("PATH", "/opt/venv/bin:$PATH", ("PATH",)),
    ]
    env = env_of(final)
    assert env["HSA_OVERRIDE_GFX_VERSION"] == "10.3.0"
    assert env["EXAMPLE_QUOTING"] == rocm.env_map["EXAMPLE_QUOTING"]
    for ins in final[5:8]:
        ((_, word),) = key_values(ins.args)
        assert word.expansions == ()


def test_labels(rocm: Recipe, cuda: Recipe) -> None:
    labels = labels_of(stages(parse(render_dockerfile(rocm)))[-1])
    assert labels["org.opencontainers.image.title"] == "envforge/golden-rocm"
    assert labels["org.opencontainers.image.description"] == rocm.description
    assert labels["org.opencontainers.image.version"] == "torch1.13.1-rocm5.2-py3.10"
    assert labels["io.envforge.recipe"] == "golden-rocm"
    assert labels["io.envforge.recipe-hash"] == rocm.hash
    assert labels["io.envforge.torch"] == "1.13.1"
    assert labels["io.envforge.rocm"] == "5.2"
    assert labels["io.envforge.python"] == "3.10"
    assert labels["io.envforge.stack-tag"] == rocm.stack_tag
    assert labels["io.envforge.gpu-arch"] == "gfx1010"
    assert labels["io.envforge.gpu-products"] == "Radeon RX 5700 XT, Radeon RX 5700"
    assert "io.envforge.cuda" not in labels
    assert not any("created" in key for key in labels)
    cuda_labels = labels_of(stages(parse(render_dockerfile(cuda)))[-1])
    assert cuda_labels["io.envforge.cuda"] == "12.6"
    assert "io.envforge.rocm" not in cuda_labels


def test_wheelhouse_and_ca_stay_in_the_build_stage(cpu: Recipe) -> None:
    text = render_dockerfile(cpu, RenderOptions(wheelhouse=True, ca_bundle=True))
    build, rest, final = stages(parse(text))
    copies = [i.args for i in build if i.keyword == "COPY"]
    assert copies == [
        "ca-bundle.pem /tmp/envforge/ca-bundle.pem",
        "wheelhouse/ /tmp/envforge/wheelhouse/",
    ]
    assert env_of(build)["PIP_CERT"] == "/tmp/envforge/ca-bundle.pem"
    assert env_of(build)["SSL_CERT_FILE"] == "/tmp/envforge/ca-bundle.pem"
    runs = [i.args for i in build if i.keyword == "RUN"]
    assert "--find-links /tmp/envforge/wheelhouse -- torch==2.13.0+cpu" in runs[3]
    assert "download.pytorch.org" not in runs[3]  # wheelhouse instead of the index
    assert "--find-links /tmp/envforge/wheelhouse" in rest[-1].args
    # nothing in the final stage refers to the staged files
    final_text = "\n".join(f"{i.keyword} {i.args}" for i in final)
    assert "/tmp/envforge" not in final_text
    assert "PIP_CERT" not in final_text
    assert [i.args for i in final if i.keyword == "COPY"] == [
        "--from=torch /opt/venv /opt/venv",
        "--from=build /opt/envforge-rest /opt/venv",
    ]
    # without the options: no COPY of context files, no CA, no find-links
    plain = parse(render_dockerfile(cpu))
    assert [i.args for i in plain if i.keyword == "COPY"] == [
        "--from=torch /opt/venv /opt/venv",
        "--from=build /opt/envforge-rest /opt/venv",
    ]
    plain_text = "\n".join(i.args for i in plain)
    assert "wheelhouse" not in plain_text
    assert "PIP_CERT" not in plain_text


def test_buildkit_mounts_instead_of_copies(cpu: Recipe) -> None:
    options = RenderOptions(wheelhouse=True, ca_bundle=True, builder="buildkit")
    text = render_dockerfile(cpu, options)
    assert not text.startswith("# syntax")  # nothing to pull: the engine's own frontend
    instructions = parse(text)
    assert [i.args for i in instructions if i.keyword == "COPY"] == [
        "--from=torch /opt/venv /opt/venv",
        "--from=build /opt/envforge-rest /opt/venv",
    ]
    installs = [i.args for i in instructions if i.keyword == "RUN" and "uv" in i.args]
    assert len(installs) == 3
    for run in installs:
        assert run.startswith(
            "--mount=type=cache,id=envforge-uv,target=/root/.cache/uv,sharing=locked "
            "--mount=type=bind,source=wheelhouse,target=/tmp/envforge/wheelhouse "
            "--mount=type=bind,source=ca-bundle.pem,target=/tmp/envforge/ca-bundle.pem "
        )
        assert "--no-cache " not in run  # uv's cache is the cache mount
    assert env_of(stages(instructions)[0])["UV_CACHE_DIR"] == "/root/.cache/uv"


def test_lock_is_installed_exactly(cpu: Recipe) -> None:
    locked = LockedInstall(
        torch=(
            "torch==2.13.0+cpu --hash=sha256:" + "a" * 64,
            "sympy==1.14.0 --hash=sha256:" + "b" * 64,
        ),
        rest=("numpy==2.4.6 --hash=sha256:" + "c" * 64,),
        name="cpu.lock.txt",
    )
    torch_stage, rest_stage, _final = stages(
        parse(render_dockerfile(cpu, RenderOptions(lock=locked)))
    )
    torch_words = shell_words(torch_stage[-1].args)
    assert locked.torch[0] in torch_words
    assert locked.torch[1] in torch_words
    assert locked.rest[0] not in torch_words
    for run in (torch_stage[-1].args, rest_stage[-1].args):
        assert run.count("--require-hashes --no-deps") == 2  # uv and pip
    assert locked.rest[0] in shell_words(rest_stage[-1].args)
    assert "torch==2.13.0+cpu --hash" not in rest_stage[-1].args


def test_base_image_override(cpu: Recipe) -> None:
    text = render_dockerfile(cpu, RenderOptions(base_image="envforge-standin/debian:bookworm"))
    froms = [i.args for i in parse(text) if i.keyword == "FROM"]
    assert froms == [
        "envforge-standin/debian:bookworm AS torch",
        "torch AS build",
        "envforge-standin/debian:bookworm",
    ]
    assert labels_of(parse(text))["org.opencontainers.image.base.name"] == (
        "envforge-standin/debian:bookworm"
    )


@pytest.mark.parametrize("image", ["ubuntu:22.04 AS x", "$BASE", "a\nRUN id", "-bad", ""])
def test_bad_base_image_override_refused(cpu: Recipe, image: str) -> None:
    with pytest.raises(InvalidInput, match="--base-image"):
        render_dockerfile(cpu, RenderOptions(base_image=image))


def test_deterministic(rocm: Recipe) -> None:
    assert render_dockerfile(rocm) == render_dockerfile(rocm)
    assert render_dockerfile(rocm).endswith('"\n')
    assert not render_dockerfile(rocm).endswith("\n\n")


def test_changing_one_env_value_changes_only_later_instructions(rocm: Recipe) -> None:
    """Caching: instructions before the changed ENV are byte-identical."""
    before = parse(render_dockerfile(rocm))
    env = tuple(
        dataclasses.replace(e, value="0") if e.name == "MIOPEN_DEBUG_CONV_IMPLICIT_GEMM" else e
        for e in rocm.env
    )
    after = parse(render_dockerfile(dataclasses.replace(rocm, env=env)))
    assert len(before) == len(after)
    changed = [n for n, (a, b) in enumerate(zip(before, after)) if a.args != b.args]
    first = changed[0]
    assert after[first].keyword == "ENV"
    assert "MIOPEN_DEBUG_CONV_IMPLICIT_GEMM" in after[first].args
    assert all(after[n].keyword in ("ENV", "LABEL") for n in changed)
    assert changed == [first, len(after) - 1]  # that ENV and the labels (recipe hash)


def test_python_version_in_the_apt_step(cuda: Recipe) -> None:
    build = stages(parse(render_dockerfile(cuda)))[0]
    assert "python3.12 -c 'import sys'" in build[1].args
    assert "--no-install-recommends python3.12 " in build[1].args
    assert "python3.12-venv" in build[2].args
    assert "python3.12 -m venv /opt/venv" in build[2].args


def test_shell_parses_every_run(rocm: Recipe) -> None:
    """Every RUN is valid POSIX shell (sh -n), with and without the options."""
    for options in (RenderOptions(), RenderOptions(wheelhouse=True, ca_bundle=True)):
        for ins in parse(render_dockerfile(rocm, options)):
            if ins.keyword == "RUN":
                done = subprocess.run(
                    ["sh", "-n", "-c", ins.args], capture_output=True, check=False
                )
                assert done.returncode == 0, (ins.args, done.stderr)


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "bad", ["a\nb", "a\rb", "a\x00b", "a\u2028b", "a\x85b", "a\x0bb", "\ud800"]
)
@pytest.mark.parametrize(
    ("key", "make"),
    [
        ("description", lambda r, v: dataclasses.replace(r, description=v)),
        (
            "env.HSA_OVERRIDE_GFX_VERSION.value",
            lambda r, v: dataclasses.replace(
                r, env=(EnvVar("HSA_OVERRIDE_GFX_VERSION", v, "why", (), "uncertain"),)
            ),
        ),
        ("packages[1]", lambda r, v: dataclasses.replace(r, packages=("a==1", v))),
        (
            "gpu.products[0]",
            lambda r, v: dataclasses.replace(r, gpu=dataclasses.replace(r.gpu, products=(v,))),
        ),
        ("torch.index", lambda r, v: dataclasses.replace(r, torch=Torch("2.0.0", v))),
        ("numpy", lambda r, v: dataclasses.replace(r, numpy=v)),
    ],
)
def test_unquotable_values_refused_naming_the_key(
    rocm: Recipe, bad: str, key: str, make: Callable[[Recipe, str], Recipe]
) -> None:
    recipe = make(rocm, bad)
    with pytest.raises(InvalidInput, match=rf"golden-rocm\.yaml: {re.escape(key)}: "):
        render_dockerfile(recipe)
    with pytest.raises(InvalidInput, match=r"golden-rocm\.yaml"):
        plan_venv(recipe)


def test_too_long_value_refused(rocm: Recipe) -> None:
    recipe = dataclasses.replace(rocm, description="x" * 4097)
    with pytest.raises(InvalidInput, match="description: is 4097 characters long"):
        render_dockerfile(recipe)
    render_dockerfile(dataclasses.replace(rocm, description="x" * 4096))


def test_too_long_line_refused(rocm: Recipe) -> None:
    products = tuple("\U0001f600" * 4000 for _ in range(6))  # 96 KB in one label line
    recipe = dataclasses.replace(rocm, gpu=dataclasses.replace(rocm.gpu, products=products))
    with pytest.raises(InvalidInput, match="65535 bytes"):
        render_dockerfile(recipe)


@pytest.mark.parametrize(
    ("key", "make"),
    [
        ("name", lambda r: dataclasses.replace(r, name="Bad Name")),
        ("python", lambda r: dataclasses.replace(r, python="3.10; id")),
        ("base_image", lambda r: dataclasses.replace(r, base_image="ubuntu:22.04\tAS x")),
    ],
)
def test_unquoted_fields_must_match_their_pattern(
    rocm: Recipe, key: str, make: Callable[[Recipe], Recipe]
) -> None:
    with pytest.raises(InvalidInput, match=rf": {key}: "):
        render_dockerfile(make(rocm))


@pytest.mark.parametrize("name", ["PATH", "VIRTUAL_ENV", "1X", "A-B", "A B"])
def test_env_names_checked(rocm: Recipe, name: str) -> None:
    recipe = dataclasses.replace(rocm, env=(EnvVar(name, "1", "why", (), "uncertain"),))
    with pytest.raises(InvalidInput, match=rf"env\.{name}"):
        render_dockerfile(recipe)


# --------------------------------------------------------------------------- venv plan


def test_venv_plan_extra_index_form(rocm: Recipe) -> None:
    plan = plan_venv(rocm)
    assert plan.recipe == "golden-rocm"
    assert plan.python == "3.10"
    assert plan.torch_requirement == "torch==1.13.1+rocm5.2"
    assert plan.index_url is None
    assert plan.extra_index_url == "https://download.pytorch.org/whl/rocm5.2"
    assert plan.requirements == (
        "torch==1.13.1+rocm5.2",
        "numpy<2",
        "torchvision==0.14.1+rocm5.2",
        "pillow==10.4.0",
    )
    assert plan.constraints == ("torch==1.13.1+rocm5.2", "numpy<2")
    assert plan.env == tuple((e.name, e.value) for e in rocm.env)
    assert plan.requirements_txt.splitlines()[1:] == list(plan.requirements)
    assert plan.constraints_txt.splitlines()[1:] == list(plan.constraints)


def test_venv_plan_index_forms(cpu: Recipe, cuda: Recipe) -> None:
    plan = plan_venv(cpu)
    assert (plan.index_url, plan.extra_index_url) == ("https://download.pytorch.org/whl/cpu", None)
    assert "torch_source=(--index-url https://download.pytorch.org/whl/cpu)" in plan.setup_script
    plan = plan_venv(cuda)
    assert (plan.index_url, plan.extra_index_url) == (None, None)
    assert "torch_source=()" in plan.setup_script
    plan = plan_venv(cpu, RenderOptions(wheelhouse=True))
    assert (plan.index_url, plan.extra_index_url) == (None, None)
    assert plan.wheelhouse
    assert "this plan needs --wheelhouse DIR" in plan.setup_script


def test_activate_script_exports_quoted_values(rocm: Recipe, tmp_path: Path) -> None:
    script = tmp_path / "activate.sh"
    script.write_text(plan_venv(rocm).activate_script)
    shown = subprocess.run(
        ["bash", "-c", 'source "$1" && env -0', "-", str(script)],
        capture_output=True,
        check=True,
    ).stdout.decode()
    env = dict(item.split("=", 1) for item in shown.split("\0") if "=" in item)
    for e in rocm.env:
        assert env[e.name] == e.value


def test_setup_script_is_valid_bash(rocm: Recipe, cpu: Recipe) -> None:
    for recipe in (rocm, cpu):
        for options in (RenderOptions(), RenderOptions(wheelhouse=True, ca_bundle=True)):
            script = plan_venv(recipe, options).setup_script
            done = subprocess.run(
                ["bash", "-n"], input=script.encode(), capture_output=True, check=False
            )
            assert done.returncode == 0, done.stderr


def test_setup_script_refuses_wrong_python_with_exit_4(cuda: Recipe, tmp_path: Path) -> None:
    """The cuda fixture wants Python 3.12; the interpreter running the tests is not
    necessarily that, so hand it a fake interpreter that reports 3.99."""
    fake = tmp_path / "python-fake"
    fake.write_text("#!/bin/sh\necho 3.99\n")
    fake.chmod(0o755)
    script = tmp_path / "setup.sh"
    script.write_text(plan_venv(cuda).setup_script)
    done = subprocess.run(
        ["bash", str(script), "--pip", str(fake), str(tmp_path / "venv")],
        capture_output=True,
        check=False,
    )
    assert done.returncode == 4
    assert b"is Python 3.99; recipe golden-cuda needs Python 3.12" in done.stderr
    assert not (tmp_path / "venv").exists()
    done = subprocess.run(["bash", str(script), "only-one-arg"], capture_output=True, check=False)
    assert done.returncode == 2
    assert b"usage: setup.sh" in done.stderr


def test_venv_plan_refuses_requirement_file_syntax(rocm: Recipe) -> None:
    """A requirements file has its own options (-r, --index-url): refuse non-PEP 508."""
    recipe = dataclasses.replace(rocm, packages=("--index-url=http://x.invalid/ foo",))
    with pytest.raises(InvalidInput, match=r"packages\[0\]"):
        plan_venv(recipe)
    # the Dockerfile passes it after `--`, as one argument: harmless there
    run = stages(parse(render_dockerfile(recipe)))[1][-1].args
    assert install_requirements(run)[-1] == "--index-url=http://x.invalid/ foo"
