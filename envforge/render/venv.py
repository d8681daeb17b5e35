"""Recipe -> venv plan: requirement set, setup script, activation script."""

from __future__ import annotations

from dataclasses import dataclass

from envforge.recipe.model import Recipe
from envforge.render.context import DEFAULT_OPTIONS, RenderOptions, venv_context
from envforge.render.templates import render_template
from envforge.stack import Stack

REQUIREMENTS = "venv/requirements.txt.j2"


@dataclass(frozen=True)
class VenvPlan:
    """What a virtualenv for a recipe contains and how to make it.

    ``setup_script`` is bash: ``bash setup.sh [--wheelhouse DIR] [--ca-bundle FILE]
    [--uv PATH | --pip] PYTHON TARGET`` creates TARGET (absent or empty) with PYTHON
    (which must be the recipe's version: exit 4 otherwise), with uv when found (else
    ``python -m venv`` and pip), then installs torch and the rest. ``activate_script`` is
    sourced after ``TARGET/bin/activate`` and exports the recipe's variables.
    """

    recipe: str
    python: str
    torch_requirement: str
    #: From the torch index form: 1.11-1.13 use ``--extra-index-url`` with an explicit
    #: local version, 2.0+ ``--index-url``. Both None with a wheelhouse or no index.
    index_url: str | None
    extra_index_url: str | None
    #: torch line, NumPy spec, packages.
    requirements: tuple[str, ...]
    #: torch and the NumPy bound: what resolving the rest may not move.
    constraints: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    requirements_txt: str
    constraints_txt: str
    setup_script: str
    activate_script: str
    #: A pyproject.toml pinning the packages from their own index to that index, which
    #: uv installs with ``-r`` beside requirements.txt ("" without any).
    index_sources: str = ""
    #: Rendered for use with a wheelhouse / a CA bundle (the script then requires them).
    wheelhouse: bool = False
    ca_bundle: bool = False


def plan_venv(
    recipe: Recipe, options: RenderOptions = DEFAULT_OPTIONS, stack: Stack | None = None
) -> VenvPlan:
    """``stack``: the recipe's stack as the caller computed it (None: from the recipe)."""
    ctx = venv_context(recipe, options, stack)
    stack = ctx.stack
    form = None if options.wheelhouse else stack.index_form
    return VenvPlan(
        recipe=recipe.name,
        python=recipe.python,
        torch_requirement=stack.torch,
        index_url=stack.index if form == "index-url" else None,
        extra_index_url=stack.index if form == "extra-index-url" else None,
        requirements=ctx.requirement_lines,
        constraints=ctx.constraint_lines,
        env=tuple((e.name, e.value) for e in recipe.env),
        requirements_txt=render_template(REQUIREMENTS, ctx=ctx, lines=ctx.requirement_lines),
        constraints_txt=render_template(REQUIREMENTS, ctx=ctx, lines=ctx.constraint_lines),
        setup_script=render_template("venv/setup.sh.j2", ctx=ctx),
        activate_script=render_template("venv/activate.sh.j2", ctx=ctx),
        index_sources="".join(f"{line}\n" for line in ctx.index_sources),
        wheelhouse=options.wheelhouse,
        ca_bundle=options.ca_bundle,
    )
