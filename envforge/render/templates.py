"""The Jinja environment over the shipped ``templates/`` folder."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

from envforge.core.resources import templates_dir
from envforge.errors import EnvforgeError


@lru_cache(maxsize=4)
def environment(folder: Path | None = None) -> jinja2.Environment:
    """StrictUndefined (a missing field is an error), no autoescaping (not HTML), and
    the trailing newline kept; block tags eat their own line ends."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(folder or templates_dir())),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )


class TemplateMissing(EnvforgeError):
    """The shipped templates cannot be found or read (a broken installation)."""


def render_template(name: str, **context: Any) -> str:
    try:
        template = environment().get_template(name)
    except jinja2.TemplateNotFound as exc:
        raise TemplateMissing(
            f"template {exc.name} not found under {templates_dir()}",
            hint="reinstall envforge (the templates ship inside the package)",
        ) from None
    return template.render(**context)
