"""Certificates in the shapes envforge wrote before format 3, made from today's: what
image labels and stores already hold must still load and verify."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from envforge.publish.certificate import SCHEMA_V1, SCHEMA_V2, Certificate, _digest


def image_shape(cert: Certificate, schema: str = SCHEMA_V2) -> dict[str, Any]:
    """``cert`` (an image binding) as format 2 (or 1) wrote it: the binding under
    ``image``, without its kind; digested again (signature dropped)."""
    assert schema in (SCHEMA_V1, SCHEMA_V2)
    data: dict[str, Any] = json.loads(cert.to_json())
    binding = data.pop("binding")
    assert binding.pop("kind") == "image"
    data["image"] = binding
    data["schema"] = schema
    data.pop("signature", None)
    data["digest"] = _digest(data)
    return data


def venv_marker(cert: Mapping[str, Any]) -> dict[str, Any]:
    """A venv certificate (format 3 data) as ``certified.json`` was before format 3:
    recipe, recipe_hash, project, fingerprint, content, content_format, level, report,
    and ``checks``/``incremental``/``skip_imports`` when present; no schema, no digest."""
    binding = cert["binding"]
    assert binding["kind"] == "venv"
    data: dict[str, Any] = {
        "recipe": cert["recipe"]["name"],
        "recipe_hash": cert["recipe"]["hash"],
        "project": binding["project"],
        "fingerprint": binding["fingerprint"],
        "content": binding["content"],
        "content_format": binding["content_format"],
        "level": cert["report"].get("level"),
        "report": cert["report"],
    }
    if binding.get("checks") is not None:
        data["checks"] = binding["checks"]
    for key in ("incremental", "skip_imports"):
        if key in cert:
            data[key] = cert[key]
    return data
