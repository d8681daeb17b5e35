"""A project's rebuild without reinstalling torch: the certified venv cloned, then synced.

A requirements change of a project (one more dependency) keeps the stack: torch, its
companions, NumPy and everything they require stay at the stack's pins. Instead of a new
venv filled from uv's cache (torch's ~750 MB copied again), the rebuild starts from the
certified venv:

1. :func:`rebuild_base`: the venv at the target holds a certificate for this recipe and
   this project (an earlier set of requirements), its files are the certified ones, and it
   was made with the same interpreter. Anything else: a new venv, as before.
2. :func:`clone`: the folder built aside (``.<name>.tmp-<owner>-XXXX``, see
   :mod:`envforge.backends.venvfs`) gets a copy of it, the markers left out. The files of
   the *stack's distributions* (:func:`stack_closure`: the stack's own distributions and
   everything their metadata requires) are hard links to the certified ones; every other
   file is copied. uv never writes into an installed file: a distribution it changes is
   uninstalled (unlinked) first, so the certified venv's files are never written through
   a link; the folder aside is then synced exactly (``uv pip install --exact`` / ``uv pip
   sync``), probed and swapped in as a new venv is. A kill at any moment leaves the
   certified venv as it was and the folder aside to the next build's sweep.
3. :func:`plan_incremental`: when every stack distribution is byte-identical to the one
   certified (hard-linked: same inode, size and mtime; or the same RECORD with every file
   matching its hash) and nothing that runs at start-up changed (``pyvenv.cfg``, the
   interpreter links, the recipe's variables, ``*.pth`` files other than the project's
   own), certification re-runs what the change can affect: the import steps of the
   distributions that are new or changed, the project's import and its checks (and the
   recipe's extra checks). The certificate says it is incremental and which certificate
   it extends (with that one's full report). Anything of the stack changed: the full probe.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from envforge.backends.venvfs import (
    VENV_KEY,
    content_digests,
    dist_label,
    distributions,
    record_paths,
    site_packages,
    verify_records,
)
from envforge.probe.spec import CHECK_PREFIX, COLLECTIVE_STEP, HEALTH_STEP, IMPORT_PREFIX
from envforge.recipe.model import Level, Recipe
from envforge.stack import stack_of

if TYPE_CHECKING:
    from envforge.project.model import Project

from envforge.backends.venv.interpreter import Interpreter
from envforge.backends.venv.layout import (
    BUILD_MARKER,
    CERT_MARKER,
    ENV_SCRIPT,
    MARKER_DIR,
    _read_json,
    read_certificate,
    venv_python,
)

#: The largest METADATA read for its Requires-Dist lines.
METADATA_MAX = 4 << 20
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


@dataclass(frozen=True)
class Base:
    """The certified venv a rebuild starts from."""

    path: Path
    #: Its ``certified.json`` and the sha256 of that file (what the new one extends).
    cert: Mapping[str, Any]
    cert_sha256: str
    #: The interpreter's version (X.Y.Z): the markers of Requires-Dist are evaluated for it.
    python: str
    #: Canonical name -> installed dist-info folder (None: required, not installed) of
    #: the stack's distributions and everything they require.
    closure: Mapping[str, str | None]


def dist_name(dist_info: str) -> str:
    """``typing_extensions-4.12.2.dist-info`` -> ``typing-extensions``."""
    return canonicalize_name(dist_info.partition("-")[0])


def _wanted(req: Requirement, python: str) -> bool:
    """Whether a Requires-Dist line applies without extras on Python ``python`` (X.Y.Z);
    a marker that cannot be evaluated counts as applying (more names, never fewer)."""
    if req.marker is None:
        return True
    env = {
        "extra": "",
        "python_version": ".".join(python.split(".")[:2]),
        "python_full_version": python,
    }
    try:
        return bool(req.marker.evaluate(env))
    except Exception:  # packaging raises several kinds for odd markers
        return True


def _requires(dist: Path, python: str) -> list[str]:
    """The names a distribution's METADATA requires on Python ``python``, extras left
    out (a line that cannot be parsed counts by its leading name)."""
    try:
        with open(dist / "METADATA", "rb") as fh:
            text = fh.read(METADATA_MAX).decode("utf-8", errors="replace")
    except OSError:
        return []
    names: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            break  # the headers end at the first empty line
        if not line.lower().startswith("requires-dist:"):
            continue
        value = line.split(":", 1)[1]
        try:
            req = Requirement(value)
        except InvalidRequirement:
            found = _NAME.match(value)
            if found:
                names.append(canonicalize_name(found.group(1)))
            continue
        if _wanted(req, python):
            names.append(canonicalize_name(req.name))
    return names


def stack_closure(venv: Path, roots: Iterable[str], python: str) -> dict[str, str | None]:
    """The distributions ``roots`` name and everything their metadata requires on Python
    ``python``, as installed in ``venv``: canonical name -> dist-info folder name, None
    when it is not installed."""
    installed = {dist_name(dist.name): dist for _sp, dist in distributions(venv)}
    found: dict[str, str | None] = {}
    todo: list[str] = [canonicalize_name(r) for r in roots]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        dist = installed.get(name)
        found[name] = dist.name if dist is not None else None
        if dist is not None:
            todo.extend(_requires(dist, python))
    return found


def _stack_roots(recipe: Recipe) -> tuple[str, ...]:
    """The recipe's own distributions (torch, NumPy, the companions, the recipe's
    packages): the project's requirements are not the stack."""
    return stack_of(recipe).distributions()


def rebuild_base(
    recipe: Recipe, target: Path, interp: Interpreter, project: Project | None
) -> Base | str:
    """The venv at ``target`` when a rebuild can start from it: certified for this recipe
    and this project (any earlier requirements), its files the certified ones (content
    digests), made with ``interp``; else why not."""
    if project is None or not venv_python(target).exists():
        return "no project venv to start from"
    markers = target / MARKER_DIR
    built = _read_json(markers / BUILD_MARKER)
    cert = read_certificate(target)
    if built is None or cert is None or cert.get("recipe_hash") != recipe.hash:
        return "the venv there is not certified for this recipe"
    binding = cert.get("project")
    if not isinstance(binding, str) or not binding.startswith(project.key() + ":"):
        return "the venv there is certified for another project"
    if built.get("interpreter") != interp.executable or built.get("python") != interp.version:
        return f"it was made with {built.get('interpreter')} {built.get('python')}"
    content = content_digests(target)
    if (
        cert.get("content") != content
        or built.get("content") != content
        or cert.get("fingerprint") != built.get("fingerprint")
    ):
        return "its files changed since it was certified"
    try:
        sha = hashlib.sha256((markers / CERT_MARKER).read_bytes()).hexdigest()
    except OSError as exc:
        return f"its certificate cannot be read: {exc.strerror or exc}"
    closure = stack_closure(target, _stack_roots(recipe), interp.version)
    return Base(target, cert, "sha256:" + sha, interp.version, closure)


# --------------------------------------------------------------------------- clone


def _linked_roots(venv: Path, dist_infos: Iterable[str]) -> set[str]:
    """What the distributions own: their dist-info folders, the top-level folders and files
    of site-packages their RECORDs list, and their files elsewhere in the venv (scripts in
    ``../../../bin``)."""
    wanted = set(dist_infos)
    roots: set[str] = set()
    inside = str(venv) + os.sep
    for sp, dist in distributions(venv):
        if dist.name not in wanted:
            continue
        roots.add(str(dist))
        heads: set[str] = set()
        for listed in record_paths(dist):
            rel = listed.replace("\\", "/")
            if rel.startswith("../"):
                where = os.path.normpath(os.path.join(sp, rel))
                if where.startswith(inside):
                    roots.add(where)
            else:
                heads.add(rel.split("/", 1)[0])
        heads -= {"", ".", "..", "__pycache__"}
        roots.update(os.path.join(sp, head) for head in heads)
    return roots


def _copy_entry(src: str, dst: str, linked: frozenset[str], link: bool = False) -> int:
    """Copy ``src`` to ``dst``: hard links for what ``linked`` names (and everything
    under it), copies for the rest; how many linked roots it met. (Plain strings and
    ``os`` calls: torch alone is ~16k files.)"""
    info = os.lstat(src)
    met = int(src in linked)
    link = link or met > 0
    if stat.S_ISLNK(info.st_mode):
        os.symlink(os.readlink(src), dst)
    elif stat.S_ISDIR(info.st_mode):
        os.mkdir(dst, stat.S_IMODE(info.st_mode) | 0o700)
        met += _copy_children(src, dst, linked, link)
        shutil.copystat(src, dst, follow_symlinks=False)
    elif stat.S_ISREG(info.st_mode):
        if link:
            os.link(src, dst)
        else:
            shutil.copy2(src, dst, follow_symlinks=False)
    # sockets, FIFOs, devices: not part of a venv, not copied
    return met


def _copy_children(src: str, dst: str, linked: frozenset[str], link: bool) -> int:
    """The entries of folder ``src`` into ``dst``; a regular file under a linked root is
    linked straight from its directory entry (no ``lstat`` of its own)."""
    met = 0
    with os.scandir(src) as it:
        entries = list(it)
    for entry in entries:
        target = os.path.join(dst, entry.name)
        if link and entry.is_file(follow_symlinks=False):
            os.link(entry.path, target)
        else:
            met += _copy_entry(entry.path, target, linked, link)
    return met


def clone(base: Base, dest: Path) -> int:
    """Copy the venv ``base`` into the empty folder ``dest`` (markers left out): the files
    of the stack's distributions (and of pip, which the sync keeps) hard-linked, the rest
    copied. Returns how many of the stack's
    folders and files were linked."""
    keep = [d for d in base.closure.values() if d]
    keep += [dist.name for _sp, dist in distributions(base.path) if dist_name(dist.name) == "pip"]
    linked = frozenset(_linked_roots(base.path, keep))
    count = 0
    for name in sorted(os.listdir(base.path)):
        if name != MARKER_DIR:
            count += _copy_entry(str(base.path / name), str(dest / name), linked)
    return count


# --------------------------------------------------------------------------- what changed


@dataclass(frozen=True)
class Incremental:
    """What an incremental certification re-runs, and what it rests on."""

    steps: tuple[str, ...]
    #: Distributions new or changed since the certified venv (labels).
    changed: tuple[str, ...]
    #: The stack's distributions, unchanged (labels).
    unchanged: tuple[str, ...]


def _same_bytes(a: Path, b: Path) -> bool:
    try:
        return a.read_bytes() == b.read_bytes()
    except OSError:
        return False


def _unchanged(base: Base, venv: Path, content: Mapping[str, str], dist: str) -> bool:
    """Whether ``dist`` in ``venv`` is byte-identical to the one certified: the same stat
    data (a hard link), or the same RECORD with every file matching its hash (a copy)."""
    old = base.cert.get("content")
    if not isinstance(old, Mapping) or dist not in old:
        return False
    if old[dist] == content.get(dist):
        return True
    for sp in site_packages(venv):
        if (sp / dist).is_dir():
            rel = sp.relative_to(venv)
            return _same_bytes(
                base.path / rel / dist / "RECORD", sp / dist / "RECORD"
            ) and not verify_records(venv, only=[dist])
    return False


def _owned_pth(venv: Path, project: Project | None) -> set[str]:
    """The ``*.pth`` files the project's own distribution installs (its editable hook)."""
    if project is None:
        return set()
    owned: set[str] = set()
    for _sp, dist in distributions(venv):
        if dist_name(dist.name) != canonicalize_name(project.name):
            continue
        try:
            lines = (dist / "RECORD").read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        owned.update(
            line.split(",", 1)[0]
            for line in lines
            if line.split(",", 1)[0].endswith(".pth") and "/" not in line.split(",", 1)[0]
        )
    return owned


def _startup_files(venv: Path, skip: set[str]) -> dict[str, bytes | str]:
    """What runs at start-up, by content: pyvenv.cfg, the interpreter links, the recipe's
    variables, sitecustomize/usercustomize and ``*.pth`` (those in ``skip`` left out)."""
    found: dict[str, bytes | str] = {}
    for rel in ("pyvenv.cfg", f"bin/{ENV_SCRIPT}"):
        try:
            found[rel] = (venv / rel).read_bytes()
        except OSError:
            found[rel] = "-"
    for name in sorted(os.listdir(venv / "bin")):
        if name.startswith("python") and (venv / "bin" / name).is_symlink():
            found[f"bin/{name}"] = os.readlink(venv / "bin" / name)
    for sp in site_packages(venv):
        for entry in sorted(sp.iterdir()):
            name = entry.name
            if name in skip or not (
                name.endswith(".pth") or name in ("sitecustomize.py", "usercustomize.py")
            ):
                continue
            try:
                found[f"{sp.relative_to(venv)}/{name}"] = entry.read_bytes()
            except OSError:
                found[f"{sp.relative_to(venv)}/{name}"] = "-"
    return found


#: Steps about the GPUs as they are now, not about what changed: always run again.
_NOW_STEPS = (HEALTH_STEP, COLLECTIVE_STEP)


def plan_incremental(
    base: Base,
    venv: Path,
    content: Mapping[str, str],
    *,
    level: Level,
    project: Project | None,
    steps: tuple[str, ...],
) -> Incremental | str:
    """What to re-run in ``venv`` (built from ``base``) of the full probe's ``steps``, or
    why the full probe must run."""
    have = base.cert.get("level")
    if not (have == level or (have == "full" and level == "quick")):
        return f"the certificate it extends is at the {have} level"
    now = stack_closure(venv, base.closure, base.python)
    for name, dist in now.items():
        if dist != base.closure.get(name):
            was = base.closure.get(name)
            return (
                f"{name} changed ({dist_label(was) if was else 'absent'} -> "
                f"{dist_label(dist) if dist else 'absent'})"
            )
        if dist is not None and not _unchanged(base, venv, content, dist):
            return f"{dist_label(dist)}'s files differ from the certified ones"
    skip = _owned_pth(venv, project) | _owned_pth(base.path, project)
    if _startup_files(venv, skip) != _startup_files(base.path, skip):
        return "files that run at start-up (pyvenv.cfg, *.pth, the recipe's variables) changed"
    changed = {
        dist_name(d) for d in content if d != VENV_KEY and not _unchanged(base, venv, content, d)
    }
    rerun = tuple(
        s
        for s in steps
        if s.startswith(CHECK_PREFIX)
        or s in _NOW_STEPS
        or (s.startswith(IMPORT_PREFIX) and canonicalize_name(s[len(IMPORT_PREFIX) :]) in changed)
    )
    return Incremental(
        steps=rerun,
        changed=tuple(sorted(dist_label(d) for d in content if dist_name(d) in changed)),
        unchanged=tuple(sorted(dist_label(d) for d in now.values() if d is not None)),
    )


def incremental_record(base: Base, plan: Incremental) -> dict[str, Any]:
    """The certificate's ``incremental`` entry: what it extends and what was re-run."""
    earlier = base.cert.get("incremental")
    report = earlier.get("base_report") if isinstance(earlier, Mapping) else base.cert.get("report")
    return {
        "extends": {
            "certificate_sha256": base.cert_sha256,
            "fingerprint": base.cert.get("fingerprint"),
            "project": base.cert.get("project"),
            "level": base.cert.get("level"),
        },
        "rerun": list(plan.steps),
        "changed": list(plan.changed),
        "unchanged_stack": list(plan.unchanged),
        #: the last full probe's report, which the stack's steps rest on
        "base_report": report,
    }
