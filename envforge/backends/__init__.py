"""Backends that build environments from rendered recipes (Docker images, virtualenvs).

``envforge.backends.docker`` is the only module that imports the ``docker`` SDK.
"""

from __future__ import annotations
