"""The render formats by name: ``envforge render`` reaches a format only through
:data:`FORMATS` (``FORMATS[fmt]``), and ``--format`` offers its keys.

A new format is one module implementing :class:`~envforge.render.formats.base.Format`,
its templates, and one line here.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Final

from envforge.render.context import RenderOptions
from envforge.render.formats import apptainer, devcontainer, dockerfile, venv
from envforge.render.formats.base import File, Format, Request

#: The formats, in the order ``--format`` lists them (the first is the default).
FORMATS: Final[MutableMapping[str, Format]] = {
    "dockerfile": dockerfile,
    "venv": venv,
    "devcontainer": devcontainer,
    "apptainer": apptainer,
}

__all__ = ["FORMATS", "File", "Format", "RenderOptions", "Request"]
