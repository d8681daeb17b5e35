"""Rendering: recipes -> Dockerfiles and venv plans, from the Jinja templates in
``templates/``. Decisions live in :mod:`envforge.render.context`; templates only print.
"""

from __future__ import annotations

from envforge.knowledge.torch_index import index_form, is_pytorch_index, torch_requirement
from envforge.render.context import RenderOptions
from envforge.render.dockerfile import render_dockerfile
from envforge.render.venv import VenvPlan, plan_venv

__all__ = [
    "RenderOptions",
    "VenvPlan",
    "index_form",
    "is_pytorch_index",
    "plan_venv",
    "render_dockerfile",
    "torch_requirement",
]
