"""Hostile recipe values never change the instructions of the rendered Dockerfile.

Recipes are built directly (``dataclasses.replace`` on a valid fixture), bypassing the
loader, so the renderer's own checks and quoting are what is tested. Each rendered
Dockerfile is parsed into instructions (tests/helpers/dockerfile_syntax.py, the classic
builder's rules); the keyword sequence must equal the benign render's, and the hostile
value must come back exactly from its ENV/LABEL value or as one shell word of the RUN.
"""

from __future__ import annotations

import copy
import dataclasses
import shlex

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from envforge.core import yamlcheck
from envforge.errors import InvalidInput, RecipeError
from envforge.recipe.checks import RESERVED_ENV
from envforge.recipe.load import load_recipe_file, parse_recipe
from envforge.recipe.model import UNQUOTABLE, EnvVar, Recipe
from envforge.render import RenderOptions, plan_venv, render_dockerfile
from envforge.render.quoting import MAX_VALUE_CHARS
from tests.helpers import paths
from tests.helpers.dockerfile_syntax import (
    Instruction,
    install_requirements,
    key_values,
    parse,
    shell_words,
    stages,
)

#: Hypothesis' failure report touches mypy_extensions.TypedDict, whose DeprecationWarning
#: (an error under this project's filterwarnings) would hide the falsifying example.
pytestmark = pytest.mark.filterwarnings(
    "ignore:mypy_extensions.TypedDict is deprecated:DeprecationWarning"
)

FIXTURE = paths.TESTS / "fixtures" / "recipes" / "golden-rocm.yaml"
BASE: Recipe = load_recipe_file(FIXTURE)
OPTIONS = (RenderOptions(), RenderOptions(wheelhouse=True, ca_bundle=True))
BENIGN = {o: [i.keyword for i in parse(render_dockerfile(BASE, o))] for o in OPTIONS}

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

NASTY = [
    '"',
    "'",
    "\\",
    "\\\\",
    '\\"',
    "$(id)",
    "`id`",
    "${HOME}",
    "$HOME",
    "$",
    "a\\",
    '" \\ RUN id #',
    '"\\',
    "\t#",
    "&& rm -rf / ;",
    "\u00a0\u2003\u3000",
    "é😀\U0010fffd",
    " leading and trailing ",
    "=",
    "\\$(x)\\`y`",
    "--index-url=http://x.invalid/",
    "-r /etc/passwd",
]

#: Control characters (other than TAB) are refused too: they would not read back the same.
CONTROLS = sorted(UNQUOTABLE | {chr(c) for c in (*range(0x20), *range(0x7F, 0xA0))} - {"\t"})

#: Any text without the characters that no quoting makes safe (TAB is kept exactly).
safe_text = st.one_of(
    st.text(
        alphabet=st.characters(
            exclude_categories=["Cs", "Cc"], exclude_characters="".join(UNQUOTABLE)
        ),
        max_size=200,
    ),
    st.sampled_from(NASTY),
    st.lists(st.sampled_from(NASTY), min_size=1, max_size=8).map("".join),
    st.builds(lambda s, n: (s * n)[:MAX_VALUE_CHARS], st.sampled_from(NASTY), st.integers(1, 4096)),
)
#: Text that contains at least one character that must be refused.
unsafe_text = st.builds(
    lambda a, bad, b: a + bad + b,
    safe_text,
    st.sampled_from(CONTROLS),
    safe_text,
)


def final_stage(text: str) -> list[Instruction]:
    return stages(parse(text))[-1]


def env_value(instructions: list[Instruction], name: str) -> str:
    for ins in instructions:
        if ins.keyword == "ENV":
            for key, word in key_values(ins.args):
                if key == name:
                    assert word.expansions == (), word
                    return word.text
    raise AssertionError(f"no ENV {name}")


def label_value(instructions: list[Instruction], name: str) -> str:
    for ins in instructions:
        if ins.keyword == "LABEL":
            for key, word in key_values(ins.args):
                if key == name:
                    assert word.expansions == (), word
                    return word.text
    raise AssertionError(f"no LABEL {name}")


def rendered(recipe: Recipe, options: RenderOptions) -> list[Instruction]:
    instructions = parse(render_dockerfile(recipe, options))
    assert [i.keyword for i in instructions] == BENIGN[options]
    return instructions


@SETTINGS
@given(value=safe_text)
@example(value='x" \\ RUN touch /pwned #')
@example(value="\\")
@example(value='"$(id)"`id`${HOME}')
def test_hostile_env_value(value: str) -> None:
    env = tuple(
        dataclasses.replace(e, value=value) if e.name == "HSA_OVERRIDE_GFX_VERSION" else e
        for e in BASE.env
    )
    recipe = dataclasses.replace(BASE, env=env)
    for options in OPTIONS:
        final = final_stage(render_dockerfile(recipe, options))
        assert [i.keyword for i in parse(render_dockerfile(recipe, options))] == BENIGN[options]
        assert env_value(final, "HSA_OVERRIDE_GFX_VERSION") == value
        # the neighbours are untouched
        assert env_value(final, "MIOPEN_DEBUG_CONV_IMPLICIT_GEMM") == "1"
    # the activation script reads back the same value in a shell
    export = [
        line
        for line in plan_venv(recipe).activate_script.splitlines()
        if line.startswith("export HSA_OVERRIDE_GFX_VERSION=")
    ]
    assert len(export) == 1
    assert shlex.split(export[0]) == ["export", f"HSA_OVERRIDE_GFX_VERSION={value}"]


@SETTINGS
@given(value=safe_text.filter(lambda s: s.strip() != ""))
def test_hostile_description(value: str) -> None:
    recipe = dataclasses.replace(BASE, description=value)
    for options in OPTIONS:
        final = final_stage(render_dockerfile(recipe, options))
        assert [i.keyword for i in parse(render_dockerfile(recipe, options))] == BENIGN[options]
        assert label_value(final, "org.opencontainers.image.description") == value
        assert label_value(final, "io.envforge.recipe") == BASE.name


@SETTINGS
@given(products=st.lists(safe_text, min_size=1, max_size=3))
def test_hostile_products(products: list[str]) -> None:
    recipe = dataclasses.replace(BASE, gpu=dataclasses.replace(BASE.gpu, products=tuple(products)))
    for options in OPTIONS:
        if sum(len(p.encode()) + 2 for p in products) > 60000:
            # all products together overflow one Dockerfile line: refused
            with pytest.raises(InvalidInput, match="65535 bytes"):
                render_dockerfile(recipe, options)
            continue
        instructions = rendered(recipe, options)
        joined = label_value(stages(instructions)[-1], "io.envforge.gpu-products")
        assert joined == ", ".join(products)


@SETTINGS
@given(package=safe_text)
@example(package="foo; touch /pwned")
@example(package="--index-url=http://x.invalid/")
@example(package="'")
@example(package=";")
def test_hostile_package(package: str) -> None:
    recipe = dataclasses.replace(BASE, packages=(BASE.packages[0], package, BASE.packages[1]))
    for options in OPTIONS:
        instructions = rendered(recipe, options)
        run = stages(instructions)[1][-1]
        assert run.keyword == "RUN"
        requirements = install_requirements(run.args)
        assert requirements == [
            "torch==1.13.1+rocm5.2",
            "numpy<2",
            BASE.packages[0],
            package,
            BASE.packages[1],
        ]
        # the torch RUN does not see it at all
        torch_run = stages(instructions)[0][-1].args
        assert install_requirements(torch_run) == ["torch==1.13.1+rocm5.2"]


@SETTINGS
@given(value=unsafe_text, where=st.sampled_from(["env", "description", "products", "packages"]))
def test_unquotable_values_are_refused(value: str, where: str) -> None:
    if where == "env":
        recipe = dataclasses.replace(
            BASE, env=(EnvVar("HSA_OVERRIDE_GFX_VERSION", value, "why", (), "uncertain"),)
        )
        key = "env.HSA_OVERRIDE_GFX_VERSION.value"
    elif where == "description":
        recipe = dataclasses.replace(BASE, description=value)
        key = "description"
    elif where == "products":
        recipe = dataclasses.replace(BASE, gpu=dataclasses.replace(BASE.gpu, products=(value,)))
        key = "gpu.products[0]"
    else:
        recipe = dataclasses.replace(BASE, packages=(value,))
        key = "packages[0]"
    for options in OPTIONS:
        with pytest.raises(InvalidInput) as info:
            render_dockerfile(recipe, options)
        assert f": {key}: " in str(info.value)
        with pytest.raises(InvalidInput):
            plan_venv(recipe, options)


@SETTINGS
@given(index=safe_text, numpy=safe_text)
def test_hostile_index_and_numpy(index: str, numpy: str) -> None:
    recipe = dataclasses.replace(
        BASE, torch=dataclasses.replace(BASE.torch, index=index), numpy=numpy
    )
    for options in OPTIONS:
        instructions = rendered(recipe, options)
        torch_words = shell_words(stages(instructions)[0][-1].args)
        rest_words = shell_words(stages(instructions)[1][-1].args)
        if not options.wheelhouse:
            # 1.13.1: the torch index is an extra index in both steps, one word each
            assert torch_words[torch_words.index("--extra-index-url") + 1] == index
            assert rest_words[rest_words.index("--extra-index-url") + 1] == index
        assert install_requirements(stages(instructions)[1][-1].args)[1] == "numpy" + numpy.strip()
        assert label_value(stages(instructions)[-1], "io.envforge.numpy") == numpy


# --------------------------------------------------------------------------- loader → render
#
# One set of checks (issue 11, class 9): whatever the loader accepts renders, and every
# ENV/LABEL value reads back exactly as the recipe wrote it; what the loader refuses
# because of a character, the renderer refuses with the same message.

RAW = yamlcheck.load_file(FIXTURE)
ENV_NAMES = st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,12}\Z").filter(
    lambda n: n not in RESERVED_ENV
)
nonblank = safe_text.filter(lambda s: s.strip() != "")


def _raw(**changes: object) -> dict[str, object]:
    data = copy.deepcopy(RAW)
    assert isinstance(data, dict)
    for key, value in changes.items():
        if key == "products":
            data["gpu"]["products"] = value
        else:
            data[key] = value
    return data


def _env_entry(value: str) -> dict[str, object]:
    return {"value": value, "why": "test", "confidence": "uncertain"}


def _reads_back(recipe: Recipe) -> None:
    for options in OPTIONS:
        final = final_stage(render_dockerfile(recipe, options))
        for e in recipe.env:
            assert env_value(final, e.name) == e.value
        labels = {
            "org.opencontainers.image.description": recipe.description,
            "io.envforge.recipe": recipe.name,
            "io.envforge.python": recipe.python,
            "io.envforge.numpy": recipe.numpy,
            "io.envforge.torch": recipe.torch.version.split("+", 1)[0],
            "io.envforge.recipe-hash": recipe.hash,
        }
        if recipe.gpu.products:
            labels["io.envforge.gpu-products"] = ", ".join(recipe.gpu.products)
        for key, value in labels.items():
            assert label_value(final, key) == value, key
        plan = plan_venv(recipe, options)
        exports = [
            shlex.split(line)[1]
            for line in plan.activate_script.splitlines()
            if line.startswith("export ")
        ]
        assert exports == [f"{e.name}={e.value}" for e in recipe.env]


@SETTINGS
@given(
    description=nonblank,
    products=st.lists(nonblank, max_size=3),
    env=st.dictionaries(ENV_NAMES, safe_text, max_size=4),
    package=st.sampled_from(["a==1", "a[x]==1.0; python_version > '3'", "b===weird", "c==2.0rc1"]),
)
@example(
    description='x" \\ RUN touch /pwned #', products=["\ta\t"], env={"A": "$(id)"}, package="a==1"
)
@example(description="\u00a0é😀", products=["a" * 2048, "b" * 2046], env={"B": ""}, package="a==1")
def test_what_the_loader_accepts_renders_and_reads_back(
    description: str, products: list[str], env: dict[str, str], package: str
) -> None:
    products = [p for p in products if p.strip()]
    data = _raw(
        description=description,
        products=products,
        env={name: _env_entry(value) for name, value in env.items()},
        packages=[package],
    )
    if len(", ".join(products)) > MAX_VALUE_CHARS:
        with pytest.raises(RecipeError, match=r"gpu\.products: together"):
            parse_recipe(data, "prop.yaml")
        return
    recipe = parse_recipe(data, "prop.yaml")  # safe text is accepted...
    _reads_back(recipe)  # ...renders, and reads back the same


@SETTINGS
@given(
    value=unsafe_text,
    where=st.sampled_from(["description", "products", "env", "package", "why", "numpy"]),
)
@example(value="a\x1b[31mb", where="description")
@example(value="\x07", where="env")
@example(value="\x9b", where="products")
def test_what_the_loader_refuses_for_a_character_render_refuses_alike(
    value: str, where: str
) -> None:
    keys = {
        "description": "description",
        "products": "gpu.products[0]",
        "env": "env.X.value",
        "package": "packages[0]",
        "why": "env.X.why",
        "numpy": "numpy",
    }
    key = keys[where]
    if where == "description":
        data = _raw(description=value)
    elif where == "products":
        data = _raw(products=[value])
    elif where == "env":
        data = _raw(env={"X": _env_entry(value)})
    elif where == "package":
        data = _raw(packages=[value])
    elif where == "why":
        data = _raw(env={"X": {**_env_entry("1"), "why": value}})
    else:
        data = _raw(numpy=value)
    with pytest.raises(RecipeError) as refused:
        parse_recipe(data, "prop.yaml")
    line = refused.value.one_line()
    assert f"prop.yaml: {key}: " in line
    assert "\n" not in line
    assert "\x1b" not in line
    if where in ("why", "numpy", "package"):
        return  # not a plain copy of the value into the recipe below
    if where == "description":
        recipe = dataclasses.replace(BASE, description=value)
    elif where == "products":
        recipe = dataclasses.replace(BASE, gpu=dataclasses.replace(BASE.gpu, products=(value,)))
    else:
        recipe = dataclasses.replace(BASE, env=(EnvVar("X", value, "why", (), "uncertain"),))
    with pytest.raises(InvalidInput) as rendered_refusal:
        render_dockerfile(recipe)
    # the same check, the same words (after the origin and key)
    assert (
        str(rendered_refusal.value).split(f"{key}: ", 1)[1]
        == refused.value.message.split(f"{key}: ", 1)[1]
    )


@pytest.mark.parametrize("name", sorted(RESERVED_ENV))
def test_reserved_env_names_refused_by_loader_and_renderer(name: str) -> None:
    with pytest.raises(RecipeError, match=rf"prop\.yaml: env\.{name}: is reserved"):
        parse_recipe(_raw(env={name: _env_entry("/x")}), "prop.yaml")
    recipe = dataclasses.replace(BASE, env=(EnvVar(name, "/x", "why", (), "uncertain"),))
    for render in (render_dockerfile, plan_venv):
        with pytest.raises(InvalidInput, match=rf"env\.{name}: is reserved"):
            render(recipe)
