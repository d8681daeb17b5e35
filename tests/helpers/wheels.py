"""Small, real wheels made on the spot (pure Python, valid RECORD): stand-ins for tests of
envforge's install mechanics, where what is installed does not matter, only how."""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def pure_wheel(
    folder: Path, name: str, version: str, origin: str, requires: tuple[str, ...] = ()
) -> Path:
    """A pure-Python wheel ``name`` whose module records its version and which index
    (``origin``) it came from; its path."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f'ORIGIN = "{origin}"\n__version__ = "{version}"\n',
        f"{dist}/METADATA": "Metadata-Version: 2.1\n"
        f"Name: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = "\n".join(record) + "\n"
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return wheel


def variant_wheel(
    folder: Path,
    name: str,
    version: str,
    label: str,
    metadata: Mapping[str, Any],
    *,
    tags: str = "py3-none-any",
) -> Path:
    """A pure-Python variant wheel made by hand to PEP 825 (https://peps.python.org/pep-0825/):
    ``{name}-{version}-{tags}-{label}.whl`` ("Variant label"), whose
    ``*.dist-info/variant.json`` ("Variant metadata") is ``metadata`` with its
    ``variants`` cut to this wheel's label, as a variant wheel carries it; its path."""
    dist = f"{name}-{version}.dist-info"
    own = {**metadata, "variants": {label: metadata["variants"][label]}}
    files = {
        f"{name}/__init__.py": f'VARIANT = "{label}"\n__version__ = "{version}"\n',
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        f"Tag: {tags}\n",
        f"{dist}/variant.json": json.dumps(own, indent=2) + "\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = "\n".join(record) + "\n"
    wheel = folder / f"{name}-{version}-{tags}-{label}.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return wheel
