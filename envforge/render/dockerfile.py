"""Recipe -> Dockerfile (two stages; builds with the classic builder, no BuildKit)."""

from __future__ import annotations

from envforge.errors import InvalidInput
from envforge.recipe.model import Recipe
from envforge.render.context import DEFAULT_OPTIONS, RenderOptions, docker_context
from envforge.render.project import ProjectLayer, project_context
from envforge.render.templates import render_template
from envforge.stack import Stack, stack_of

DOCKERFILE_TEMPLATE = "docker/Dockerfile.j2"
#: The classic builder refuses longer Dockerfile lines ("line greater than max allowed").
MAX_LINE_BYTES = 65535


def render_dockerfile(
    recipe: Recipe,
    options: RenderOptions = DEFAULT_OPTIONS,
    stack: Stack | None = None,
    *,
    project: ProjectLayer | None = None,
) -> str:
    """The Dockerfile text for ``recipe`` and its ``stack`` (None: computed from the recipe):
    deterministic (no timestamps), same input -> same bytes. Raises
    :class:`~envforge.errors.InvalidInput` for values that cannot be quoted (line breaks,
    NUL), are too long, or a malformed name, Python version or base image."""
    ctx = docker_context(recipe, options, stack)
    extra = None
    if project is not None:  # the project's layers on top (see envforge.render.project)
        extra = project_context(project, options, stack_of(recipe) if stack is None else stack)
    text = render_template(DOCKERFILE_TEMPLATE, ctx=ctx, project=extra)
    for number, line in enumerate(text.split("\n"), start=1):
        if len(line.encode("utf-8")) > MAX_LINE_BYTES:
            raise InvalidInput(
                f"{recipe.origin}: the Dockerfile's line {number} ({line[:40]}...) would be "
                f"longer than the {MAX_LINE_BYTES} bytes the builder accepts",
                hint="shorten the recipe's values (products, description, env values)",
            )
    return text
