"""The virtualenv backend: a recipe → a certified virtualenv on this host, made with uv.

Where environments live
=======================
``envforge.paths.venvs_dir()/<recipe>/<stack tag>-<12 hex of the recipe hash>``, e.g.
``~/.local/share/envforge/venvs/cpu/torch2.13.0-cpu-py3.11-3f9a0c1b2d4e`` (under
``$ENVFORGE_HOME/venvs`` when that is set). Inside, next to the usual venv files:

* ``.envforge/build.json``: what was installed (the *install key*: recipe hash,
  requirement set, sources, lock digest, interpreter) and a fingerprint of the installed
  set (every ``*.dist-info`` name and the sha256 of its ``RECORD``);
* ``.envforge/certified.json``: the probe report that passed, with the recipe hash and
  the fingerprint it was taken against; written only on a pass;
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
2. Same install key and fingerprint as the existing environment → no install. If it is
   also certified for this recipe hash at this level → "up to date", nothing runs.
3. Otherwise build into ``.<name>.tmp-XXXX`` next to the target (``uv venv
   --relocatable``, then ``uv pip install`` — or ``uv pip sync --require-hashes`` from the
   recipe's lock file), and rename it into place only when the install succeeded, so a
   failure leaves nothing half-written.
4. Certify: run the probe (:mod:`envforge.probe`) with the venv's interpreter and the
   recipe's env vars. Pass → ``certified.json``. Fail → exit 1; the environment stays
   (uncertified), so the next build only probes again. Either way the run is kept in the
   local evidence store (:mod:`envforge.evidence_store`, ``ENVFORGE_HOME/reports``).
"""

from __future__ import annotations

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
from typing import Any, Literal

from envforge import __version__, lock, paths, proc
from envforge.errors import CertificationFailed, EnvforgeError, InvalidInput, Unavailable
from envforge.fsutil import make_dirs, make_temp_dir, write_atomically
from envforge.probe.report import ProbeReport, StepResult
from envforge.probe.runner import LocalPythonTarget, ProbeListener, run_probe
from envforge.probe.spec import ProbeSpec
from envforge.recipe.model import Level, Recipe
from envforge.render import RenderOptions, plan_venv

#: Seconds one ``uv`` install may run (a ROCm torch wheel is several GB).
INSTALL_TIMEOUT = 3600.0
#: Seconds an interpreter gets to say its version.
INTERPRETER_TIMEOUT = 15.0
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
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
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
    recipe: Recipe, interp: Interpreter, options: VenvOptions, lock_file: Path | None
) -> str:
    """What an install depends on; equal keys mean the same environment would be made."""
    plan = plan_venv(recipe, RenderOptions(wheelhouse=options.wheelhouse is not None))
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
        "sources": lock.source_args(recipe, options.wheelhouse),
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


def _install(
    recipe: Recipe, interp: Interpreter, target: Path, options: VenvOptions, lock_file: Path | None
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
    plan = plan_venv(recipe, RenderOptions(wheelhouse=options.wheelhouse is not None))
    sources = lock.source_args(recipe, options.wheelhouse)
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


def _replace_dir(new: Path, target: Path) -> None:
    """Move ``new`` to ``target``; an existing ``target`` is swapped out, then removed."""
    old: Path | None = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}-{int(time.time())}")
        os.replace(target, old)
    try:
        os.replace(new, target)
    except BaseException:
        if old is not None:
            os.replace(old, target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def probe_venv(
    recipe: Recipe,
    venv: Path,
    *,
    level: Level | None = None,
    step_timeout: float | None = None,
    extra_checks: Sequence[Path] = (),
    environ: Mapping[str, str] | None = None,
    listener: ProbeListener | None = None,
) -> ProbeReport:
    """Run the probe for ``recipe`` with the venv's interpreter and the recipe's env vars."""
    spec = ProbeSpec.from_recipe(
        recipe, level=level, step_timeout=step_timeout, extra_checks=extra_checks
    )
    target = LocalPythonTarget(
        python=str(venv_python(venv)), env=venv_environ(venv, recipe, environ)
    )
    return run_probe(spec, target, listener=listener)


def _level_ok(certified: Mapping[str, Any], wanted: Level) -> bool:
    have = certified.get("level")
    return have == wanted or (have == "full" and wanted == "quick")


def _certify(recipe: Recipe, target: Path, level: Level, options: VenvOptions) -> ProbeReport:
    """Probe the venv at ``target``; record the verdict (``certified.json`` only on a pass).

    Raises :class:`CertificationFailed` when the probe did not pass.
    """
    markers = target / MARKER_DIR
    options.say(f"certifying {recipe.name} ({level} probe)")
    report = probe_venv(
        recipe,
        target,
        level=level,
        step_timeout=options.step_timeout,
        extra_checks=options.extra_checks,
        environ=options.environ,
        listener=options.listener,
    )
    report.write(markers)
    _keep_evidence(recipe, target, report, options.environ)
    cert_path = markers / CERT_MARKER
    if not report.passed:
        cert_path.unlink(missing_ok=True)
        problem = report.first_problem
        what = (
            f"{problem.name}: {problem.status}" + (f" ({problem.detail})" if problem.detail else "")
            if problem
            else "no steps ran"
        )
        raise CertificationFailed(
            f"{recipe.name}: the probe did not pass in {target}: {what}",
            hint=f"see {markers / 'probe.json'}; `envforge doctor {recipe.name}` checks the host",
        )
    write_atomically(
        cert_path,
        json.dumps(
            {
                "recipe": recipe.name,
                "recipe_hash": recipe.hash,
                "fingerprint": fingerprint(target),
                "level": report.level,
                "report": report.to_dict(),
            },
            indent=2,
        )
        + "\n",
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


def certify(recipe: Recipe, options: VenvOptions = VenvOptions()) -> VenvBuildResult:
    """Probe the recipe's existing venv again and record the verdict (no install).

    Raises :class:`InvalidInput` when there is no venv yet, :class:`CertificationFailed`
    when the probe did not pass (the venv stays, uncertified).
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
    report = _certify(recipe, current.path, level, options)
    return VenvBuildResult(
        recipe.name, current.path, "recertified", interp, report, time.monotonic() - started
    )


def build(recipe: Recipe, options: VenvOptions = VenvOptions()) -> VenvBuildResult:
    """Build (or confirm) the certified venv for ``recipe``; see the module docstring.

    Raises :class:`Unavailable` (no interpreter, index unreachable), :class:`BuildFailed`
    (uv failed) or :class:`CertificationFailed` (the probe did not pass; the venv stays,
    uncertified).
    """
    started = time.monotonic()
    lock.check_inputs(options.wheelhouse, options.ca_bundle)
    interp = find_interpreter(recipe.python, explicit=options.python, environ=options.environ)
    lock_file = lock.lock_path(recipe) if options.use_lock else None
    stale = lock.stale_lock(recipe) if options.use_lock else None
    if stale is not None:
        options.say(
            f"note: ignoring stale lock {stale} (the recipe changed):"
            f" run `envforge lock {recipe.name}`"
        )
    key = install_key(recipe, interp, options, lock_file)
    target = venv_location(recipe, options.environ)
    markers = target / MARKER_DIR
    level: Level = options.level or recipe.certify.level

    built = _read_json(markers / BUILD_MARKER)
    same_install = (
        not options.force
        and built is not None
        and built.get("install_key") == key
        and venv_python(target).exists()
        and built.get("fingerprint") == fingerprint(target)
    )
    if same_install and built is not None:
        cert = _read_json(markers / CERT_MARKER)
        if (
            cert is not None
            and not options.extra_checks
            and cert.get("recipe_hash") == recipe.hash
            and cert.get("fingerprint") == built.get("fingerprint")
            and _level_ok(cert, level)
        ):
            return VenvBuildResult(
                recipe.name,
                target,
                "up-to-date",
                interp,
                None,
                time.monotonic() - started,
                lock_file,
            )
        status: BuildStatus = "recertified"
        options.say(f"{target}: installed set unchanged; certifying")
    else:
        status = "reinstalled" if target.exists() else "built"
        make_dirs(target.parent)
        tmp = make_temp_dir(f".{target.name}.tmp-", target.parent)
        try:
            options.say(f"creating {target} with Python {interp.version} ({interp.executable})")
            shutil.rmtree(tmp)  # uv venv wants to create the folder itself
            _install(recipe, interp, tmp, options, lock_file)
            (tmp / MARKER_DIR).mkdir(exist_ok=True)
            write_atomically(
                tmp / MARKER_DIR / BUILD_MARKER,
                json.dumps(
                    {
                        "recipe": recipe.name,
                        "recipe_hash": recipe.hash,
                        "stack_tag": recipe.stack_tag,
                        "install_key": key,
                        "fingerprint": fingerprint(tmp),
                        "python": interp.version,
                        "interpreter": interp.executable,
                        "lock": str(lock_file) if lock_file else None,
                        "envforge_version": __version__,
                    },
                    indent=2,
                )
                + "\n",
            )
            _replace_dir(tmp, target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    report = _certify(recipe, target, level, options)
    return VenvBuildResult(
        recipe.name, target, status, interp, report, time.monotonic() - started, lock_file
    )


# --------------------------------------------------------------------------- state


@dataclass(frozen=True)
class VenvState:
    path: Path
    exists: bool
    certified: bool
    problem: str | None = None


def state(recipe: Recipe, environ: Mapping[str, str] | None = None) -> VenvState:
    """Whether the recipe's venv exists and is certified, without building anything."""
    target = venv_location(recipe, environ)
    if not venv_python(target).exists():
        return VenvState(target, False, False)
    markers = target / MARKER_DIR
    built = _read_json(markers / BUILD_MARKER)
    cert = _read_json(markers / CERT_MARKER)
    certified = (
        built is not None
        and cert is not None
        and cert.get("recipe_hash") == recipe.hash
        and cert.get("fingerprint") == fingerprint(target)
    )
    problem = None
    if not certified:
        last = _read_json(markers / "probe.json")
        steps = [
            StepResult.from_dict(s) for s in (last or {}).get("steps", []) if isinstance(s, dict)
        ]
        bad = next((s for s in steps if s.status not in ("pass", "skip")), None)
        problem = f"last probe: {bad.name} {bad.status}" if bad else "not certified"
    return VenvState(target, True, certified, problem)


# --------------------------------------------------------------------------- shell


def run_in_venv(
    venv: Path, recipe: Recipe, argv: Sequence[str], environ: Mapping[str, str] | None = None
) -> int:
    """Run ``argv`` in the foreground with the venv's environment; its exit code.

    The command stays in envforge's process group so the terminal's Ctrl-C reaches it;
    envforge ignores SIGINT meanwhile and passes the command's status through (a signal
    death N as 128+N, as shells do).
    """
    if not argv:
        raise InvalidInput(
            "no command given", hint="envforge shell RECIPE --backend venv -- python"
        )
    env = venv_environ(venv, recipe, environ)
    exe = shutil.which(argv[0], path=env["PATH"]) if os.sep not in argv[0] else argv[0]
    if exe is None:
        sys.stderr.write(
            f"envforge: {argv[0]}: command not found in the {recipe.name} venv or on PATH\n"
        )
        return 127
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        child = subprocess.Popen([exe, *argv[1:]], env=env)
        code = child.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
    return 128 + (-code) if code < 0 else code


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
    return build(recipe, options).path, True


def problem_of(report: ProbeReport) -> str:
    bad = report.first_problem
    if bad is None:
        return "the probe did not pass"
    detail = f" ({bad.detail[:200]})" if bad.detail else ""
    return f"{bad.name}: {bad.status}{detail}"


# --------------------------------------------------------------------------- backend protocol


def describe(recipe: Recipe) -> str:
    """The recipe's environment on this backend: its venv folder."""
    return f"venv {venv_location(recipe)}"


def serves(recipe: Recipe, options: VenvOptions = VenvOptions()) -> tuple[bool, str]:
    """The venv backend serves any recipe: it builds the venv when there is none."""
    current = state(recipe, options.environ)
    return True, "" if current.certified else f"{current.path} is built first"


def check(
    recipe: Recipe, options: VenvOptions = VenvOptions(), *, step_timeout: float = 30.0
) -> str | None:
    """Make sure the recipe's venv exists and passes a quick probe now; None, else why not.

    A venv built just now was certified by that build; an existing one is probed again.
    """
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


def run(recipe: Recipe, argv: Sequence[str], options: VenvOptions = VenvOptions()) -> int:
    """Run ``argv`` (default: ``$SHELL``, else bash) in the recipe's certified venv (built
    first if there is none); its exit code."""
    command = list(argv) or [os.environ.get("SHELL") or "bash"]
    path, _fresh = ensure(recipe, options)
    return run_in_venv(path, recipe, command, options.environ)
