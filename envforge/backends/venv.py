"""The virtualenv backend: a recipe → a certified virtualenv on this host, made with uv.

Where environments live
=======================
``envforge.paths.venvs_dir()/<recipe>/<stack tag>-<12 hex of the recipe hash>``, e.g.
``~/.local/share/envforge/venvs/cpu/torch2.13.0-cpu-py3.11-3f9a0c1b2d4e`` (under
``$ENVFORGE_HOME/venvs`` when that is set). Inside, next to the usual venv files:

* ``.envforge/build.json``: what was installed (the *install key*: recipe hash,
  requirement set, sources, lock digest, interpreter), a fingerprint of the installed
  set (every ``*.dist-info`` name and the sha256 of its ``RECORD``) and the *content
  digests* (:func:`~envforge.backends.venvfs.content_digests`: the stat data of every
  file the RECORDs list, per distribution);
* ``.envforge/certified.json``: the probe report that passed, with the recipe hash, the
  fingerprint and the content digests it was taken against; written only on a pass, and
  valid only while the venv's content digests are those (checked before every use);
* ``.envforge/probe.json`` / ``probe.junit.xml``: the last probe run, pass or fail;
* ``bin/envforge-env.sh``: the recipe's environment variables (sourced by
  ``bin/activate`` too, so ``source VENV/bin/activate`` applies them).

Building
========
1. Find an interpreter that *is* the recipe's Python (``--python PATH``, else
   ``pythonX.Y``, ``pythonXY``, ``python3``, ``python`` on ``PATH``, else the ``py``
   launcher); never another version. None → :class:`Unavailable` (exit 4) saying how to
   get one. uv never downloads interpreters (``UV_PYTHON_DOWNLOADS=never``,
   ``--python-preference only-system``).
2. Sweep what a killed envforge left beside the venv (``.<name>.tmp-<pid>.<start>-*``
   folders whose owner is gone, :func:`~envforge.backends.venvfs.sweep_leftovers`).
3. Same install key, fingerprint and content digests as recorded → no install (content
   digests that differ while every file still matches its RECORD hash: also no install).
   If it is also certified for this recipe hash at this level → "up to date", nothing
   runs; else the probe runs where the venv is and, on a pass, the certificate is
   written (a failure leaves any earlier certificate as it was).
4. Otherwise build a new venv *aside*, in ``.<name>.tmp-<pid>.<start>-XXXX`` next to the
   target (``uv venv --relocatable``, then ``uv pip install --link-mode copy`` — or ``uv
   pip sync --require-hashes`` from the recipe's lock file), check every file against its
   RECORD hash, probe it there, and swap it in (one ``renameat2(RENAME_EXCHANGE)``) when
   the probe passed — or, when it failed, only if there is no certified venv to keep.
   A certified venv therefore stays usable and certified until a new one passes; a
   failure or Ctrl-C removes the folder aside.
   Either way the probe run is kept in the local evidence store
   (:mod:`envforge.evidence_store`, ``ENVFORGE_HOME/reports``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from envforge import __version__, lock, paths, proc
from envforge.backends.base import BackendOption, HostCheck, Options, ProbeFailed
from envforge.backends.venvfs import (
    aside_prefix,
    content_digests,
    describe_changes,
    swap_dirs,
    sweep_leftovers,
    verify_records,
)
from envforge.container.devices import visible_env
from envforge.errors import (
    BuildFailed,
    CertificationFailed,
    EnvforgeError,
    ExitCode,
    Interrupted,
    InvalidInput,
    Unavailable,
)
from envforge.fsutil import make_dirs, make_temp_dir, write_atomically, write_files, writing
from envforge.jsonlimits import load_file
from envforge.probe.report import ProbeReport, StepResult
from envforge.probe.runner import LocalPythonTarget, ProbeListener, run_probe
from envforge.probe.spec import ProbeSpec
from envforge.recipe.model import Level, Recipe
from envforge.render import RenderOptions, plan_venv
from envforge.stack import Stack, stack_of

if TYPE_CHECKING:
    from envforge.detect import HostInfo
    from envforge.doctor import Finding

#: Seconds one ``uv`` install may run (a ROCm torch wheel is several GB).
INSTALL_TIMEOUT = 3600.0
#: Seconds an interpreter gets to say its version.
INTERPRETER_TIMEOUT = 15.0
#: Files are copied from uv's cache, never hard-linked: an edit inside a venv must not
#: change uv's cache (and every venv linked to it), and a reinstall must bring back the
#: real files.
LINK_MODE = ("--link-mode", "copy")
MARKER_DIR = ".envforge"
BUILD_MARKER = "build.json"
CERT_MARKER = "certified.json"
ENV_SCRIPT = "envforge-env.sh"
ACTIVATE_HOOK = (
    "\n# envforge: the recipe's environment variables\n"
    '[ -f "$VIRTUAL_ENV/bin/{name}" ] && . "$VIRTUAL_ENV/bin/{name}"\n'
)

Say = Callable[[str], None]
BuildStatus = Literal["built", "reinstalled", "recertified", "up-to-date"]


def _quiet(_text: str) -> None:
    pass


# --------------------------------------------------------------------------- interpreters


@dataclass(frozen=True)
class Interpreter:
    """A Python interpreter that was run and said what it is."""

    path: str
    #: ``sys.executable`` of the interpreter (a shim resolved to the real binary).
    executable: str
    version: str  # "3.11.7"

    @property
    def minor(self) -> str:
        return ".".join(self.version.split(".")[:2])


_PROBE_CODE = "import sys; print('%d.%d.%d' % sys.version_info[:3]); print(sys.executable)"


def query_interpreter(
    argv: Sequence[str], environ: Mapping[str, str] | None = None
) -> Interpreter | None:
    """Run ``argv -c …``; the interpreter's version and executable, or None if it fails."""
    try:
        done = proc.run([*argv, "-c", _PROBE_CODE], timeout=INTERPRETER_TIMEOUT, env=environ)
    except OSError:
        return None
    lines = done.stdout.strip().splitlines()
    if not done.ok or len(lines) < 2 or not re.fullmatch(r"\d+\.\d+\.\d+", lines[0].strip()):
        return None
    return Interpreter(
        path=argv[0], executable=lines[1].strip() or argv[0], version=lines[0].strip()
    )


def _path_candidates(version: str, path_var: str) -> list[str]:
    """Executables on PATH, in PATH order, for the names that could be Python ``version``."""
    names = [f"python{version}", f"python{version.replace('.', '')}", "python3", "python"]
    found: list[str] = []
    for folder in path_var.split(os.pathsep):
        if not folder:
            continue
        for name in names:
            candidate = os.path.join(folder, name)
            if (
                os.path.isfile(candidate)
                and os.access(candidate, os.X_OK)
                and candidate not in found
            ):
                found.append(candidate)
    # Most specific names first, PATH order within a name.
    return sorted(found, key=lambda c: names.index(os.path.basename(c)))


def _off_path_hints(version: str, home: Path) -> list[str]:
    """Interpreters of ``version`` that exist but are not on PATH (pyenv, uv-managed)."""
    patterns = [
        (home / ".pyenv" / "versions", f"{version}.*", f"bin/python{version}"),
        (
            home / ".local" / "share" / "uv" / "python",
            f"cpython-{version}.*",
            f"bin/python{version}",
        ),
    ]
    hits: list[str] = []
    for base, pattern, rel in patterns:
        try:
            for folder in sorted(base.glob(pattern)):
                exe = folder / rel
                if exe.is_file():
                    hits.append(str(exe))
        except OSError:
            continue
    return hits


def find_interpreter(
    version: str,
    *,
    explicit: str | None = None,
    environ: Mapping[str, str] | None = None,
    home: Path | None = None,
) -> Interpreter:
    """An interpreter that is Python ``version`` ("3.10"); :class:`Unavailable` if none.

    ``explicit`` (``--python PATH``) must be that version too: it is never swapped for
    another. PATH comes from ``environ``.
    """
    env = dict(os.environ if environ is None else environ)
    if explicit is not None:
        exe = shutil.which(explicit, path=env.get("PATH")) if os.sep not in explicit else explicit
        found = query_interpreter([exe], env) if exe else None
        if found is None:
            raise Unavailable(
                f"--python {explicit}: cannot run it as a Python interpreter",
                hint=f"pass the path of a Python {version} interpreter",
            )
        if found.minor != version:
            raise Unavailable(
                f"--python {explicit} is Python {found.version}; the recipe needs Python {version}",
                hint=f"pass a Python {version} interpreter (envforge never uses another version)",
            )
        return found
    seen: list[str] = []
    for candidate in _path_candidates(version, env.get("PATH", "")):
        found = query_interpreter([candidate], env)
        if found is not None:
            seen.append(found.version)
            if found.minor == version:
                return found
    launcher = shutil.which("py", path=env.get("PATH"))
    if launcher:
        found = query_interpreter([launcher, f"-{version}"], env)
        if found is not None and found.minor == version:
            return Interpreter(
                path=found.executable, executable=found.executable, version=found.version
            )
    off_path = _off_path_hints(version, home if home is not None else Path.home())
    hint = (
        f"install Python {version} and put python{version} on PATH, or pass --python PATH: "
        f'`uv python install {version}` then --python "$(uv python find {version})"; '
        f"or apt install python{version} (deadsnakes PPA on Ubuntu); or `pyenv install {version}`"
    )
    if off_path:
        hint = f"found {off_path[0]} (not on PATH): pass --python {off_path[0]}; or " + hint
    versions = sorted(set(seen))
    others = f" (PATH has Python {', '.join(versions)})" if versions else ""
    raise Unavailable(f"no python{version} interpreter found{others}", hint=hint)


# --------------------------------------------------------------------------- locations


def short_hash(recipe: Recipe) -> str:
    return recipe.hash.split(":", 1)[-1][:12]


def venv_location(recipe: Recipe, environ: Mapping[str, str] | None = None) -> Path:
    """``venvs_dir()/<recipe>/<stack tag>-<12 hex of the recipe hash>``."""
    return paths.venvs_dir(environ) / recipe.name / f"{recipe.stack_tag}-{short_hash(recipe)}"


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def site_packages(venv: Path) -> list[Path]:
    return sorted((venv / "lib").glob("python*/site-packages"))


def fingerprint(venv: Path) -> str:
    """sha256 over every installed distribution's name and RECORD (path-independent)."""
    digest = hashlib.sha256()
    for sp in site_packages(venv):
        for dist in sorted(sp.glob("*.dist-info")):
            record = dist / "RECORD"
            try:
                body = hashlib.sha256(record.read_bytes()).hexdigest()
            except OSError:
                body = "-"
            digest.update(f"{dist.name}\0{body}\n".encode())
    return "sha256:" + digest.hexdigest()


def _read_json(path: Path) -> dict[str, Any] | None:
    try:  # regular files only, bounded, within the decoder's limits
        data = load_file(path)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# --------------------------------------------------------------------------- options / results


@dataclass(frozen=True)
class VenvOptions:
    """How to build (none of this is part of the recipe hash)."""

    python: str | None = None
    wheelhouse: Path | None = None
    ca_bundle: Path | None = None
    level: Level | None = None
    step_timeout: float | None = None
    extra_checks: tuple[Path, ...] = ()
    #: Install from the recipe's lock file when one matches it.
    use_lock: bool = True
    #: Rebuild even when up to date.
    force: bool = False
    #: Base environment (PATH for the interpreter search, proxies, certificates).
    environ: Mapping[str, str] | None = None
    listener: ProbeListener | None = None
    say: Say = field(default=_quiet)


@dataclass(frozen=True)
class VenvBuildResult:
    recipe: str
    path: Path
    status: BuildStatus
    interpreter: Interpreter
    report: ProbeReport | None
    seconds: float
    lock: Path | None = None

    @property
    def certified(self) -> bool:
        return self.status == "up-to-date" or (self.report is not None and self.report.passed)

    def facts(self) -> list[tuple[str, str]]:
        return [("backend", "venv"), ("status", self.status)]

    def printed(self) -> str:
        return str(self.path)

    def closing(self) -> str | None:
        if self.status == "up-to-date":
            return f"{self.recipe}: up to date ({self.path})"
        return f"{self.recipe}: certified ({self.status} in {self.seconds:.1f}s)"

    def failure(self) -> CertificationFailed | None:
        return None  # a probe that did not pass raised

    def to_dict(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe,
            "backend": "venv",
            "path": str(self.path),
            "status": self.status,
            "certified": self.certified,
            "python": self.interpreter.version,
            "lock": str(self.lock) if self.lock else None,
            "seconds": round(self.seconds, 3),
        }


# --------------------------------------------------------------------------- build


def install_key(
    recipe: Recipe,
    interp: Interpreter,
    options: VenvOptions,
    lock_file: Path | None,
    stack: Stack | None = None,
) -> str:
    """What an install depends on; equal keys mean the same environment would be made."""
    stack = stack_of(recipe) if stack is None else stack
    plan = plan_venv(recipe, RenderOptions(wheelhouse=options.wheelhouse is not None), stack)
    wheels: list[str] = []
    if options.wheelhouse is not None:
        for p in sorted(options.wheelhouse.glob("*.whl")):
            try:
                wheels.append(f"{p.name}:{p.stat().st_size}")
            except OSError:
                continue
    data = {
        "recipe_hash": recipe.hash,
        "requirements": list(plan.requirements),
        "constraints": list(plan.constraints),
        "sources": lock.source_args(recipe, options.wheelhouse, stack),
        "wheelhouse": wheels,
        "lock": hashlib.sha256(lock_file.read_bytes()).hexdigest() if lock_file else None,
        "python": interp.version,
        "executable": interp.executable,
    }
    blob = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(blob).hexdigest()


def venv_environ(
    venv: Path, recipe: Recipe, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment a command runs with inside the venv: its bin first, the recipe's vars."""
    env = dict(os.environ if base is None else base)
    env.pop("PYTHONHOME", None)
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = str(venv / "bin") + (os.pathsep + env["PATH"] if env.get("PATH") else "")
    env.update(recipe.env_map)
    return env


def _install(  # noqa: PLR0917 - one step of build, its inputs spelled out
    recipe: Recipe,
    interp: Interpreter,
    target: Path,
    options: VenvOptions,
    lock_file: Path | None,
    stack: Stack,
) -> None:
    uv = lock.uv_bin()
    env = lock.uv_env(options.ca_bundle, options.environ)
    made = proc.run(
        [
            uv,
            "venv",
            "--quiet",
            "--relocatable",
            "--python",
            interp.executable,
            "--python-preference",
            "only-system",
            "--no-config",
            str(target),
        ],
        timeout=120.0,
        env=env,
    )
    if not made.ok:
        raise lock.uv_failure(
            "creating the venv", made, recipe, hint="check the interpreter with --python PATH"
        )
    py = str(venv_python(target))
    plan = plan_venv(recipe, RenderOptions(wheelhouse=options.wheelhouse is not None), stack)
    sources = lock.source_args(recipe, options.wheelhouse, stack)
    with tempfile.TemporaryDirectory(prefix="envforge-venv-") as tmp:
        if lock_file is not None:
            argv = [
                uv,
                "pip",
                "sync",
                "--python",
                py,
                "--require-hashes",
                "--no-config",
                *LINK_MODE,
                str(lock_file),
                *sources,
            ]
        else:
            req = Path(tmp) / "requirements.txt"
            con = Path(tmp) / "constraints.txt"
            req.write_text(plan.requirements_txt, encoding="utf-8")
            con.write_text(plan.constraints_txt, encoding="utf-8")
            argv = [
                uv,
                "pip",
                "install",
                "--python",
                py,
                "--no-config",
                *LINK_MODE,
                "-r",
                str(req),
                "-c",
                str(con),
                *sources,
            ]
        options.say(
            f"installing {len(plan.requirements)} requirement(s)"
            + (f" from the lock {lock_file}" if lock_file else "")
            + " with uv"
        )
        done = proc.run(argv, timeout=INSTALL_TIMEOUT, env=env)
    if not done.ok:
        raise lock.uv_failure(
            "installing the requirements",
            done,
            recipe,
            hint="see the message; --wheelhouse DIR installs torch from local wheels",
        )
    bin_dir = target / "bin"
    (bin_dir / ENV_SCRIPT).write_text(plan.activate_script, encoding="utf-8")
    activate = bin_dir / "activate"
    if activate.is_file():
        with activate.open("a", encoding="utf-8") as fh:
            fh.write(ACTIVATE_HOOK.format(name=ENV_SCRIPT))


def probe_venv(
    recipe: Recipe,
    venv: Path,
    *,
    level: Level | None = None,
    step_timeout: float | None = None,
    extra_checks: Sequence[Path] = (),
    environ: Mapping[str, str] | None = None,
    listener: ProbeListener | None = None,
    stack: Stack | None = None,
) -> ProbeReport:
    """Run the probe for ``recipe`` (its ``stack``; None: computed from the recipe) with the
    venv's interpreter and the recipe's env vars."""
    spec = ProbeSpec.from_recipe(
        recipe, level=level, step_timeout=step_timeout, extra_checks=extra_checks, stack=stack
    )
    target = LocalPythonTarget(
        python=str(venv_python(venv)), env=venv_environ(venv, recipe, environ)
    )
    return run_probe(spec, target, listener=listener)


def _level_ok(certified: Mapping[str, Any], wanted: Level) -> bool:
    have = certified.get("level")
    return have == wanted or (have == "full" and wanted == "quick")


def _failure(
    recipe: Recipe, where: Path, report: ProbeReport, *, kept: str | None, rebuilt: bool = False
) -> CertificationFailed:
    problem = report.first_problem
    what = (
        f"{problem.name}: {problem.status}" + (f" ({problem.detail})" if problem.detail else "")
        if problem
        else "no steps ran"
    )
    markers = where / MARKER_DIR
    hint = f"see {markers / 'probe.json'}; `envforge doctor {recipe.name}` checks the host"
    if kept:
        hint = f"{kept}; " + hint
    if rebuilt:
        message = f"{recipe.name}: the probe of the venv rebuilt for {where} did not pass: {what}"
    else:
        message = f"{recipe.name}: the probe did not pass in {where}: {what}"
    return CertificationFailed(message, hint=hint)


def _probe(
    recipe: Recipe, venv: Path, level: Level, options: VenvOptions, stack: Stack
) -> ProbeReport:
    options.say(f"certifying {recipe.name} ({level} probe)")
    try:
        report = probe_venv(
            recipe,
            venv,
            level=level,
            step_timeout=options.step_timeout,
            extra_checks=options.extra_checks,
            environ=options.environ,
            listener=options.listener,
            stack=stack,
        )
    except Interrupted:
        raise Interrupted(
            f"{recipe.name}: probe interrupted; the worker was stopped and the venv's"
            " certificate is as it was",
            hint=f"run `envforge build {recipe.name} --backend venv` again",
        ) from None
    _keep_evidence(recipe, venv, report, options.environ)
    return report


def _cert_json(recipe: Recipe, report: ProbeReport, fp: str, content: Mapping[str, str]) -> str:
    data = {
        "recipe": recipe.name,
        "recipe_hash": recipe.hash,
        "fingerprint": fp,
        "content": dict(content),
        "level": report.level,
        "report": report.to_dict(),
    }
    return json.dumps(data, indent=2) + "\n"


def _marker_json(data: Mapping[str, Any]) -> str:
    return json.dumps(dict(data), indent=2) + "\n"


def valid_certificate(
    recipe: Recipe, venv: Path, content: Mapping[str, str] | None = None
) -> dict[str, Any] | None:
    """The venv's ``certified.json`` when it holds for ``recipe`` and the venv's content
    now (``content``: :func:`content_digests` already taken); else None."""
    markers = venv / MARKER_DIR
    built = _read_json(markers / BUILD_MARKER)
    cert = _read_json(markers / CERT_MARKER)
    if built is None or cert is None or cert.get("recipe_hash") != recipe.hash:
        return None
    now = dict(content) if content is not None else content_digests(venv)
    if (
        cert.get("fingerprint") != built.get("fingerprint")
        or cert.get("content") != now
        or built.get("content") != now
    ):
        return None
    return cert


def _recertify_in_place(  # noqa: PLR0917 - one step of build, its inputs spelled out
    recipe: Recipe,
    target: Path,
    built: Mapping[str, Any],
    content: Mapping[str, str],
    level: Level,
    options: VenvOptions,
    stack: Stack,
) -> ProbeReport:
    """Probe the installed venv where it is (a probe changes no file RECORD lists); on a
    pass write ``build.json`` (its content digests now) and ``certified.json`` together. A
    failure or interrupt leaves the previous certificate as it was."""
    markers = target / MARKER_DIR
    before = valid_certificate(recipe, target, content)
    report = _probe(recipe, target, level, options, stack)
    report.write(markers)
    if not report.passed:
        kept = (
            f"{target} keeps its earlier certificate ({before.get('level')} probe)"
            if before is not None
            else None
        )
        raise _failure(recipe, target, report, kept=kept)
    fp = fingerprint(target)
    now_built = {**built, "fingerprint": fp, "content": dict(content)}
    write_files(
        [
            (markers / BUILD_MARKER, _marker_json(now_built), 0o644),
            (markers / CERT_MARKER, _cert_json(recipe, report, fp, content), 0o644),
        ]
    )
    return report


def _keep_evidence(
    recipe: Recipe, target: Path, report: ProbeReport, environ: Mapping[str, str] | None
) -> None:
    """Every venv certification (pass or fail) goes to the local evidence store
    (``ENVFORGE_HOME`` of ``environ``, like the venvs themselves)."""
    from envforge import paths  # noqa: PLC0415 - only when certifying
    from envforge.evidence_store import record_venv  # noqa: PLC0415 - only when certifying

    record_venv(
        {
            "recipe": recipe.name,
            "recipe_hash": recipe.hash,
            "fingerprint": fingerprint(target),
            "level": report.level,
            "report": report.to_dict(),
        },
        root=paths.reports_dir(environ),
    )


def recertify(recipe: Recipe, options: VenvOptions = VenvOptions()) -> VenvBuildResult:
    """Probe the recipe's existing venv again and record the verdict (no install).

    Raises :class:`InvalidInput` when there is no venv yet, :class:`CertificationFailed`
    when the probe did not pass (a certificate the venv had stays) or the venv's files
    changed since they were installed (``build`` reinstalls them).
    """
    started = time.monotonic()
    current = state(recipe, options.environ)
    if not current.exists:
        raise InvalidInput(
            f"no venv for {recipe.name} at {current.path}",
            hint=f"envforge build {recipe.name} --backend venv",
        )
    built = _read_json(current.path / MARKER_DIR / BUILD_MARKER) or {}
    interp = Interpreter(
        path=str(venv_python(current.path)),
        executable=str(built.get("interpreter") or venv_python(current.path)),
        version=str(built.get("python") or recipe.python),
    )
    level: Level = options.level or recipe.certify.level
    content = content_digests(current.path)
    if built.get("content") != content:
        problems = verify_records(current.path)
        if problems:
            raise CertificationFailed(
                f"{current.path}: {len(problems)} installed file(s) changed since the install"
                f" ({problems[0]})",
                hint=f"`envforge build {recipe.name} --backend venv` reinstalls and certifies it",
            )
    report = _recertify_in_place(
        recipe, current.path, built, content, level, options, stack_of(recipe)
    )
    return VenvBuildResult(
        recipe.name, current.path, "recertified", interp, report, time.monotonic() - started
    )


def _reinstall_reason(
    target: Path, built: Mapping[str, Any] | None, key: str, options: VenvOptions
) -> tuple[str | None, dict[str, str]]:
    """(why the venv must be (re)installed, or None; its content digests now)."""
    if not venv_python(target).exists() or built is None:
        return "new", {}
    if options.force:
        return "forced", {}
    if built.get("install_key") != key:
        return "the install inputs changed", {}
    content = content_digests(target)
    if built.get("content") == content:
        return None, content
    # The cheap check differs: the full one tells touched from modified.
    if built.get("fingerprint") != fingerprint(target):
        return "the installed set changed", content
    problems = verify_records(target)
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        return f"installed files changed: {problems[0]}{more}", content
    return None, content


def make(recipe: Recipe, options: VenvOptions = VenvOptions()) -> VenvBuildResult:
    """Build (or confirm) the certified venv for ``recipe``; see the module docstring.

    Raises :class:`Unavailable` (no interpreter, index unreachable), :class:`BuildFailed`
    (uv failed) or :class:`CertificationFailed` (the probe did not pass: a certified venv
    that was there stays as it was; without one the new venv stays, uncertified).
    """
    started = time.monotonic()
    lock.check_inputs(options.wheelhouse, options.ca_bundle)
    interp = find_interpreter(recipe.python, explicit=options.python, environ=options.environ)
    stack = stack_of(recipe)
    lock.check_wheelhouse(stack, options.wheelhouse)
    lock_file = lock.lock_path(recipe, stack) if options.use_lock else None
    stale = lock.stale_lock(recipe, stack) if options.use_lock else None
    if stale is not None:
        options.say(
            f"note: ignoring stale lock {stale} (the recipe changed):"
            f" run `envforge lock {recipe.name}`"
        )
    key = install_key(recipe, interp, options, lock_file, stack)
    target = venv_location(recipe, options.environ)
    markers = target / MARKER_DIR
    level: Level = options.level or recipe.certify.level
    make_dirs(target.parent)
    for gone in sweep_leftovers(target.parent):
        options.say(f"removed {gone}, left by an envforge that was stopped")

    built = _read_json(markers / BUILD_MARKER)
    why, content = _reinstall_reason(target, built, key, options)
    if why is None and built is not None:
        cert = valid_certificate(recipe, target, content)
        if cert is not None and not options.extra_checks and _level_ok(cert, level):
            return VenvBuildResult(
                recipe.name,
                target,
                "up-to-date",
                interp,
                None,
                time.monotonic() - started,
                lock_file,
            )
        options.say(f"{target}: installed set unchanged; certifying")
        report = _recertify_in_place(recipe, target, built, content, level, options, stack)
        return VenvBuildResult(
            recipe.name, target, "recertified", interp, report, time.monotonic() - started,
            lock_file,
        )

    status: BuildStatus = "built" if why == "new" and not target.exists() else "reinstalled"
    if status == "reinstalled":
        options.say(
            f"{target}: reinstalling ({why}); the current venv stays until the new one passes"
        )
    report = _build_aside(recipe, interp, target, key, lock_file, level, options, stack)
    return VenvBuildResult(
        recipe.name, target, status, interp, report, time.monotonic() - started, lock_file
    )


def _build_aside(  # noqa: PLR0917 - one step of build, its inputs spelled out
    recipe: Recipe,
    interp: Interpreter,
    target: Path,
    key: str,
    lock_file: Path | None,
    level: Level,
    options: VenvOptions,
    stack: Stack,
) -> ProbeReport:
    """Install and probe a new venv in ``.<name>.tmp-<owner>-XXXX`` beside ``target``; swap
    it in when it passed, or when there is no certified venv to keep. The folder aside is
    removed in every other outcome (failure, Ctrl-C); one left by a killed envforge is
    swept by the next build."""
    aside = make_temp_dir(aside_prefix(target), target.parent)
    try:
        options.say(f"creating {target} with Python {interp.version} ({interp.executable})")
        shutil.rmtree(aside)  # uv venv wants to create the folder itself
        _install(recipe, interp, aside, options, lock_file, stack)
        corrupt = verify_records(aside)
        if corrupt:
            more = f" (+{len(corrupt) - 1} more)" if len(corrupt) > 1 else ""
            raise BuildFailed(
                f"the installed files do not match their RECORD hashes: {corrupt[0]}{more}",
                hint="uv's cache holds a modified copy: `uv cache clean`, then build again",
            )
        content = content_digests(aside)
        fp = fingerprint(aside)
        build_data = {
            "recipe": recipe.name,
            "recipe_hash": recipe.hash,
            "stack_tag": recipe.stack_tag,
            "install_key": key,
            "fingerprint": fp,
            "content": content,
            "python": interp.version,
            "interpreter": interp.executable,
            "lock": str(lock_file) if lock_file else None,
            "envforge_version": __version__,
        }
        aside_markers = aside / MARKER_DIR
        write_atomically(aside_markers / BUILD_MARKER, _marker_json(build_data))
        report = _probe(recipe, aside, level, options, stack)
        report.write(aside_markers)
        if report.passed:
            write_atomically(aside_markers / CERT_MARKER, _cert_json(recipe, report, fp, content))
        old = valid_certificate(recipe, target) if venv_python(target).exists() else None
        if not report.passed and old is not None:
            # Keep the certified venv; the failed probe is its last probe run.
            report.write(target / MARKER_DIR)
            kept = f"{target} stays as it was, certified ({old.get('level')} probe)"
            raise _failure(recipe, target, report, kept=kept, rebuilt=True)
        with writing(target):
            previous = swap_dirs(aside, target)
        if previous is not None:
            shutil.rmtree(previous, ignore_errors=True)
        if not report.passed:
            raise _failure(recipe, target, report, kept=None)
        return report
    finally:
        if os.path.lexists(aside):
            shutil.rmtree(aside, ignore_errors=True)


# --------------------------------------------------------------------------- state


@dataclass(frozen=True)
class VenvState:
    path: Path
    exists: bool
    certified: bool
    problem: str | None = None
    #: What changed in the venv's files since it was certified (None: nothing, or it was
    #: never certified for this recipe).
    changed: str | None = None


def state(recipe: Recipe, environ: Mapping[str, str] | None = None) -> VenvState:
    """Whether the recipe's venv exists and is certified, without building anything.

    Certified means: a ``certified.json`` for this recipe hash whose content digests
    (:func:`~envforge.backends.venvfs.content_digests`) are those of the venv now.
    """
    target = venv_location(recipe, environ)
    if not venv_python(target).exists():
        return VenvState(target, False, False)
    markers = target / MARKER_DIR
    content = content_digests(target)
    if valid_certificate(recipe, target, content) is not None:
        return VenvState(target, True, True)
    cert = _read_json(markers / CERT_MARKER)
    if cert is not None and cert.get("recipe_hash") == recipe.hash:
        recorded = cert.get("content")
        if isinstance(recorded, dict) and recorded != content:
            changed = describe_changes(target, recorded) or "files changed"
            return VenvState(target, True, False, f"changed since certified: {changed}", changed)
    last = _read_json(markers / "probe.json")
    steps = [
        StepResult.from_dict(s) for s in (last or {}).get("steps", []) if isinstance(s, dict)
    ]
    bad = next((s for s in steps if s.status not in ("pass", "skip")), None)
    problem = f"last probe: {bad.name} {bad.status}" if bad else "not certified"
    return VenvState(target, True, False, problem)


# --------------------------------------------------------------------------- shell

#: Signals sent to envforge (by ``kill``, a supervisor, a CI runner) that are passed on to
#: the command. The terminal's own signals (Ctrl-C, Ctrl-\, a resize) reach the command
#: directly, as it runs in envforge's process group; those are not sent twice.
FORWARDED_SIGNALS: tuple[str, ...] = (
    "SIGINT",
    "SIGTERM",
    "SIGHUP",
    "SIGQUIT",
    "SIGUSR1",
    "SIGUSR2",
    "SIGWINCH",
)
#: si_code of a signal the kernel generated (the terminal's Ctrl-C) rather than kill().
_SI_KERNEL = 0x80


class CommandNotRunnable(EnvforgeError):
    """The command given to ``shell`` cannot be run: 127 not found, 126 not executable."""

    def __init__(self, message: str, *, hint: str, code: int) -> None:
        super().__init__(message, hint=hint)
        self.code = code


def resolve_command(command: str, path_var: str, where: str) -> str:
    """The executable ``command`` names (a path, or a name looked up on ``path_var``), as a
    shell finds it; :class:`CommandNotRunnable` 127 (not found) or 126 (found, but a folder
    or not executable), as shells report them."""
    if not command:
        raise CommandNotRunnable(
            "the command is an empty string", hint="give a command after --", code=127
        )
    if os.sep in command:
        candidates = [command]
    else:
        candidates = [os.path.join(d or ".", command) for d in path_var.split(os.pathsep)]
    blocked: str | None = None
    for candidate in candidates:
        if not os.path.exists(candidate):
            continue
        if os.path.isdir(candidate):
            blocked = blocked or f"{candidate} is a folder"
            continue
        if not os.access(candidate, os.X_OK):
            blocked = blocked or f"{candidate} is not executable"
            continue
        return candidate
    if blocked is not None:
        raise CommandNotRunnable(
            f"{command}: command not executable ({blocked})",
            hint="name a program, or make the file executable (chmod +x)",
            code=int(ExitCode.NOT_EXECUTABLE),
        )
    what = command if os.sep in command else f"{command} (searched {where})"
    raise CommandNotRunnable(
        f"{what}: command not found",
        hint="check the name; `envforge shell RECIPE -- which NAME` shows what is on PATH",
        code=int(ExitCode.NOT_FOUND),
    )


def _not_runnable(exc: CommandNotRunnable) -> int:
    sys.stderr.write(f"envforge: error: {exc.one_line()}\n")
    sys.stderr.flush()
    return exc.code


def run_in_venv(
    venv: Path, recipe: Recipe, argv: Sequence[str], environ: Mapping[str, str] | None = None
) -> int:
    """Run ``argv`` in the foreground with the venv's environment; its exit code.

    The command stays in envforge's process group, so the terminal's Ctrl-C (and Ctrl-\\,
    Ctrl-Z, resizes) reach it directly. Signals sent to envforge itself
    (:data:`FORWARDED_SIGNALS`: ``kill -TERM``, a supervisor's SIGINT) are passed on to it.
    The command's status is passed through: its own exit code, or 128+N when it died of
    signal N, as shells do. A command that cannot be run is 127 (not found) or 126 (not
    executable), with one line on stderr.
    """
    if not argv:
        raise InvalidInput(
            "no command given", hint="envforge shell RECIPE --backend venv -- python"
        )
    env = venv_environ(venv, recipe, environ)
    try:
        exe = resolve_command(argv[0], env["PATH"], f"the {recipe.name} venv and PATH")
    except CommandNotRunnable as exc:
        return _not_runnable(exc)
    return run_forwarding(argv, env, executable=exe)


def run_forwarding(argv: Sequence[str], env: Mapping[str, str], *, executable: str) -> int:
    """Run ``executable`` with ``argv`` (``argv[0]`` as typed, as a shell passes it) in this
    process group; forward the signals envforge is sent; its status (128+N for death by
    signal N)."""
    argv0 = argv[0]
    sigs = [
        sig for name in FORWARDED_SIGNALS if (sig := getattr(signal, name, None)) is not None
    ]
    waitset = [*sigs, signal.SIGCHLD]
    early: list[int] = []
    handlers: dict[int, Any] = {}
    for sig in sigs:
        # Until the child runs and the signals are blocked: note them, forward them later.
        handlers[int(sig)] = signal.signal(sig, lambda signum, _frame: early.append(signum))
    masked = False
    try:
        try:
            child = subprocess.Popen(list(argv), executable=executable, env=dict(env))
        except OSError as exc:
            status = 127 if isinstance(exc, FileNotFoundError) else 126
            what = "command not found" if status == 127 else "command not executable"
            return _not_runnable(
                CommandNotRunnable(
                    f"{argv0}: {what} ({exc.strerror or exc})",
                    hint="check the command and, for a script, its #! line",
                    code=status,
                )
            )
        for sig in sigs:  # a signal some other thread takes has no siginfo: forward it
            signal.signal(sig, lambda signum, _frame: _send(child, signum))
        if hasattr(signal, "sigtimedwait"):
            signal.pthread_sigmask(signal.SIG_BLOCK, waitset)
            masked = True
        for signum in early:
            _send(child, signum)
        while True:
            polled = child.poll()
            if polled is not None:
                code = polled
                break
            if not masked:
                code = child.wait()
                break
            info = signal.sigtimedwait(waitset, 1.0)
            if info is None or info.si_signo == signal.SIGCHLD:
                continue
            if info.si_code != _SI_KERNEL:  # sent to envforge, not by the terminal
                _send(child, info.si_signo)
    finally:
        if masked:
            while signal.sigtimedwait(waitset, 0) is not None:
                pass  # the command has ended: what came meanwhile was for it
        for signum, old in handlers.items():
            signal.signal(signum, old)
        if masked:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, waitset)
    return 128 + (-code) if code < 0 else code


def _send(child: subprocess.Popen[bytes], signum: int) -> None:
    if child.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signum)


def quick_probe(
    recipe: Recipe,
    venv: Path,
    *,
    step_timeout: float = 30.0,
    environ: Mapping[str, str] | None = None,
    listener: ProbeListener | None = None,
) -> ProbeReport:
    """The quick level, short deadlines: is the GPU usable right now?"""
    return probe_venv(
        recipe, venv, level="quick", step_timeout=step_timeout, environ=environ, listener=listener
    )


def ensure(recipe: Recipe, options: VenvOptions = VenvOptions()) -> tuple[Path, bool]:
    """The recipe's certified venv, built first when there is none: (path, just built).

    An existing certified venv is used as it is, whatever options built it (a shell does
    not rebuild because ``--wheelhouse`` is not given this time).
    """
    current = state(recipe, options.environ)
    if current.certified:
        return current.path, False
    if current.changed is not None:
        raise CertificationFailed(
            f"{current.path} changed since it was certified: {current.changed}",
            hint=f"`envforge build {recipe.name} --backend venv` re-certifies it,"
            " reinstalling what changed",
        )
    return make(recipe, options).path, True


def problem_of(report: ProbeReport) -> str:
    bad = report.first_problem
    if bad is None:
        return "the probe did not pass"
    detail = f" ({bad.detail[:200]})" if bad.detail else ""
    return f"{bad.name}: {bad.status}{detail}"


# --------------------------------------------------------------------------- backend protocol

#: The flags only this backend has (``envforge build`` / ``shell``).
CLI_OPTIONS: tuple[BackendOption, ...] = (
    BackendOption("--python", "python", "venv backend: the interpreter to use (must be the "
                  "recipe's Python version).", ("build", "shell"), metavar="PATH"),
    BackendOption("--wheelhouse", "wheelhouse", "venv backend, when the venv must be built: "
                  "install torch from these wheels.", ("shell",), kind="dir"),
    BackendOption("--ca-bundle", "ca_bundle", "venv backend, when the venv must be built: PEM "
                  "bundle uv trusts.", ("shell",), kind="file"),
)

GIB = 1024**3

#: Rough space a venv takes (site-packages), by vendor: ROCm wheels bundle the
#: user-space ROCm libraries.
SPACE_ESTIMATE: dict[str, int] = {"amd": 16 * GIB, "nvidia": 8 * GIB, "none": 2 * GIB}


def cli_options() -> tuple[BackendOption, ...]:
    """The flags only this backend has."""
    return CLI_OPTIONS


def venv_options(options: Options | VenvOptions) -> VenvOptions:
    """This backend's view of a command's :class:`~envforge.backends.base.Options`: the
    ``--gpu`` selection becomes this process's environment plus the visible-devices
    variables in the host's numbering."""
    if isinstance(options, VenvOptions):
        return options
    if options.signing_key is not None:
        options.say("venv certifications are not signed (--signing-key signs Docker images)")
    extra = options.extra
    environ = options.environ
    if options.gpus is not None:
        base = os.environ if environ is None else environ
        environ = {**base, **visible_env(options.gpus, container=False)}
    return VenvOptions(
        python=extra.get("python"),
        wheelhouse=options.wheelhouse or extra.get("wheelhouse"),
        ca_bundle=options.ca_bundle or extra.get("ca_bundle"),
        level=options.level,
        step_timeout=options.step_timeout,
        listener=options.listener,
        say=options.say,
        environ=environ,
    )


def build(recipe: Recipe, options: Options | VenvOptions = VenvOptions()) -> VenvBuildResult:
    """:func:`make` the recipe's certified venv. With a command's options, the probe's
    reports are copied to ``report_dir`` (pass or fail), and a probe that did not pass is
    a :class:`~envforge.backends.base.ProbeFailed` carrying the report."""
    if isinstance(options, VenvOptions):
        return make(recipe, options)
    return _reporting(recipe, venv_options(options), options.report_dir, make)


def certify(recipe: Recipe, options: Options | VenvOptions = VenvOptions()) -> VenvBuildResult:
    """:func:`recertify` the recipe's existing venv (reports as :func:`build`)."""
    if isinstance(options, VenvOptions):
        return recertify(recipe, options)
    return _reporting(recipe, venv_options(options), options.report_dir, recertify)


def _reporting(
    recipe: Recipe,
    options: VenvOptions,
    report_dir: Path | None,
    step: Callable[[Recipe, VenvOptions], VenvBuildResult],
) -> VenvBuildResult:
    markers = venv_location(recipe, options.environ) / MARKER_DIR
    try:
        return step(recipe, options)
    except CertificationFailed as exc:
        raise ProbeFailed(exc.message, hint=exc.hint, report=_last_report(markers)) from None
    finally:
        if report_dir is not None:
            for name in ("probe.json", "probe.junit.xml", "certified.json"):
                if (markers / name).is_file():
                    write_atomically(report_dir / name, (markers / name).read_bytes())


def _last_report(markers: Path) -> ProbeReport | None:
    try:
        return ProbeReport.from_json((markers / "probe.json").read_text(encoding="utf-8"))
    except (OSError, EnvforgeError):
        return None


def findings(recipe: Recipe | None, host: HostInfo, check: HostCheck) -> list[Finding]:
    """Nothing beyond doctor's host checks: a venv needs the GPU's device nodes and
    driver, which every backend needs."""
    del recipe, host, check
    return []


def disk_need(vendor: str) -> tuple[int, Path]:
    """Bytes a venv for ``vendor`` takes, and the folder venvs go to."""
    return SPACE_ESTIMATE[vendor], paths.state_dir()


def describe(recipe: Recipe) -> str:
    """The recipe's environment on this backend: its venv folder."""
    return f"venv {venv_location(recipe)}"


def serves(recipe: Recipe, options: Options | VenvOptions = VenvOptions()) -> tuple[bool, str]:
    """The venv backend serves any recipe: it builds the venv when there is none."""
    options = venv_options(options)
    current = state(recipe, options.environ)
    return True, "" if current.certified else f"{current.path} is built first"


def check(
    recipe: Recipe,
    options: Options | VenvOptions = VenvOptions(),
    *,
    step_timeout: float = 30.0,
) -> str | None:
    """Make sure the recipe's venv exists and passes a quick probe now; None, else why not.

    A venv built just now was certified by that build; an existing one is probed again.
    """
    options = venv_options(options)
    try:
        path, fresh = ensure(recipe, options)
        if not fresh:
            report = quick_probe(
                recipe,
                path,
                step_timeout=step_timeout,
                environ=options.environ,
                listener=options.listener,
            )
            if not report.passed:
                return "quick probe: " + problem_of(report)
    except EnvforgeError as exc:
        return exc.one_line()
    return None


def run(
    recipe: Recipe, argv: Sequence[str], options: Options | VenvOptions = VenvOptions()
) -> int:
    """Run ``argv`` (default: ``$SHELL``, else bash) in the recipe's certified venv (built
    first if there is none); its exit code."""
    options = venv_options(options)
    command = list(argv) or [os.environ.get("SHELL") or "bash"]
    path, _fresh = ensure(recipe, options)
    return run_in_venv(path, recipe, command, options.environ)
