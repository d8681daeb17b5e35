"""A fleet task's signing key, handed over by reference (``fleet plan --signing-key REF``).

The plan's folder is shared by every node (and often by everyone with access to the
cluster's file system), so the key itself never goes there: ``plan.json`` holds only
where each node finds it,

* ``/abs/path/envforge.key``: a file on the node (the same path on every node: a
  node-local file, or a mount only the job's user can read);
* ``env:NAME``: the node's environment variable NAME, which holds the key file's path or
  the PEM key itself (a CI secret): a PEM key is written for the task's run to a private
  temporary file (mode 0600, under the node's ``$TMPDIR``, never the plan's folder) and
  removed when the task ends.

The task passes the key's path to its ``build``/``certify`` as ``ENVFORGE_SIGNING_KEY``,
so its certificate and attestation are signed on the node. Nothing is read at planning
time: the planning host need not hold the key.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from envforge.errors import InvalidInput

ENV_PREFIX = "env:"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_MATERIAL = "PRIVATE KEY"


def _material(text: str) -> bool:
    return _MATERIAL in text or "\n" in text or len(text) > 4096


def key_ref(text: str, plan_folder: Path, *, setting: str = "--signing-key") -> str:
    """``text`` as the plan keeps it (``env:NAME`` or an absolute path); InvalidInput
    (exit 2, never quoting it) for key material, a bad name, or a path inside the
    plan's folder (which every node and its users read)."""
    if _material(text):
        raise InvalidInput(
            f"{setting} holds key material, not a reference to a key (not shown here)",
            hint="name a key file on the nodes (/abs/path/envforge.key) or env:NAME",
        )
    if text.startswith(ENV_PREFIX):
        name = text[len(ENV_PREFIX) :]
        if not _NAME.fullmatch(name):
            raise InvalidInput(
                f"{setting} {text!r}: not env:NAME with a variable name",
                hint="env:ENVFORGE_SITE_KEY",
            )
        return text
    path = Path(text).expanduser()
    if not path.is_absolute():
        path = Path.cwd() / path
    path = Path(os.path.normpath(path))
    folder = Path(os.path.normpath(plan_folder.absolute()))
    if path == folder or folder in path.parents:
        raise InvalidInput(
            f"{setting} {path}: inside the plan's folder, which every node reads",
            hint="keep the key outside the shared plan folder (a node-local path, or env:NAME)",
        )
    return str(path)


def ref_problem(value: str) -> str | None:
    """Why ``value`` (read from a plan.json) is not a key reference, or None."""
    if not value:
        return None
    if _material(value):
        return "holds key material"
    if value.startswith(ENV_PREFIX):
        return None if _NAME.fullmatch(value[len(ENV_PREFIX) :]) else "not env:NAME"
    return None if Path(value).is_absolute() else "not an absolute path"


@contextmanager
def key_path(ref: str, environ: Mapping[str, str]) -> Iterator[str]:
    """The path of the key ``ref`` names on this node, for as long as the block runs (a
    PEM key from a variable: a private temporary file, removed after)."""
    if not ref.startswith(ENV_PREFIX):
        yield ref
        return
    name = ref[len(ENV_PREFIX) :]
    value = environ.get(name, "")
    if not value.strip():
        raise InvalidInput(
            f"the plan's signing key is env:{name}, and {name} is not set on this node",
            hint=f"export {name} (the key file's path, or the PEM key) in the task's environment",
        )
    if _MATERIAL not in value:
        yield value.strip()
        return
    fd, name_ = tempfile.mkstemp(prefix="envforge-key-", suffix=".pem")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(value.strip() + "\n")
        yield name_
    finally:
        Path(name_).unlink(missing_ok=True)
