"""Installing a recipe's requirement set into a venv with uv; the install key."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from envforge import lock
from envforge.backends.venv import share
from envforge.core import paths, proc
from envforge.core.fsutil import write_atomically
from envforge.core.mirror import Mirrors, index_mirror_from_env, index_mirror_options
from envforge.recipe.model import Recipe
from envforge.render import RenderOptions, VenvPlan, plan_venv
from envforge.stack import Stack, stack_of

if TYPE_CHECKING:
    from envforge.project.model import Project

from envforge.backends.venv.interpreter import Interpreter
from envforge.backends.venv.layout import (
    ACTIVATE_HOOK,
    ENV_SCRIPT,
    INSTALL_TIMEOUT,
    VenvOptions,
    project_binding,
    venv_python,
)
from envforge.project.resolve import project_stack


def stack_for(recipe: Recipe, project: Project | None) -> Stack:
    """The recipe's stack, with the project's requirements on top when there is one (after
    checking that the stack's pins satisfy them: exit 2 naming both sides otherwise)."""
    if project is None:
        return stack_of(recipe)

    return project_stack(project, recipe)


def render_options(options: VenvOptions) -> RenderOptions:
    """How the venv's plan is rendered: for its wheelhouse, through its index mirror
    (none given: ``ENVFORGE_INDEX_MIRROR``, read by the renderer)."""
    mirror = index_mirror_options(options.index_mirror)
    if not mirror:
        found = index_mirror_from_env(options.environ)
        mirror = {"mirrors": found.pairs, "default_index": found.default}
    return RenderOptions(wheelhouse=options.wheelhouse is not None, **mirror)


def mirrors_of(options: VenvOptions) -> Mirrors:
    """The index pairs the venv is installed through."""
    return render_options(options).mirrors or ()


def install_key(
    recipe: Recipe,
    interp: Interpreter,
    options: VenvOptions,
    lock_file: Path | None,
    stack: Stack | None = None,
) -> str:
    """What an install depends on; equal keys mean the same environment would be made."""
    stack = stack_of(recipe) if stack is None else stack
    plan = plan_venv(recipe, render_options(options), stack)
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
        "index_sources": plan.index_sources,
        "sources": lock.source_args(recipe, options.wheelhouse, stack, mirrors_of(options)),
        "wheelhouse": wheels,
        "lock": hashlib.sha256(lock.read_lock(lock_file)).hexdigest() if lock_file else None,
        "python": interp.version,
        "executable": interp.executable,
        "project": project_binding(options.project),
        "project_constraints": list(options.project.constraints) if options.project else [],
        "editable": _editable(options.project),
    }
    blob = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(blob).hexdigest()


def _editable(project: Project | None) -> str | None:
    """The folder installed editable: a project that can be installed itself."""
    return str(project.root) if project is not None and project.installable else None


def _install_editable(  # noqa: PLR0917 - one step of build, its inputs spelled out
    recipe: Recipe,
    py: str,
    root: Path,
    options: VenvOptions,
    env: Mapping[str, str],
    sources: list[str],
) -> None:
    """``uv pip install --no-deps -e ROOT``: the project's own code, edits seen without a
    rebuild; its dependencies are already there (installed from the stack or the lock)."""
    options.say(f"installing the project {root} (editable)")
    done = proc.run(
        [
            lock.uv_bin(),
            "pip",
            "install",
            "--python",
            py,
            "--no-config",
            "--no-deps",
            "-e",
            str(root),
            *sources,
        ],
        timeout=INSTALL_TIMEOUT,
        env=env,
    )
    if not done.ok:
        raise lock.uv_failure(
            f"installing the project {root}",
            done,
            recipe,
            hint="check the project's [build-system] (pip install -e . must work there)",
        )


def _install_pip(
    py: str, target: Path, options: VenvOptions, env: Mapping[str, str], sources: list[str]
) -> None:
    """pip inside the venv, so that ``pip install X`` in ``envforge shell`` installs there
    (not into the outer environment); certified with the rest. Where no pip can be had
    (an offline wheelhouse without it), the venv is still usable: say so, go on."""
    if (target / "bin" / "pip").exists():
        return
    done = proc.run(
        [
            lock.uv_bin(),
            "pip",
            "install",
            "--python",
            py,
            "--no-config",
            "pip",
            *sources,
        ],
        timeout=INSTALL_TIMEOUT,
        env=env,
    )
    if not done.ok:
        options.say(
            "note: pip could not be installed in the venv (no pip wheel in the sources);"
            " `pip` in `envforge shell` is the outer one"
        )


def venv_environ(
    venv: Path, recipe: Recipe, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment a command runs with inside the venv: its bin first, the recipe's vars."""
    env = dict(os.environ if base is None else base)
    env.pop("PYTHONHOME", None)
    env.pop("PYTHONPYCACHEPREFIX", None)  # the certified bytecode is in the venv
    # certification recorded the bytecode its probe wrote; bytecode written later would be
    # uncertified (a module the probe never imported is compiled in memory when used)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = str(venv / "bin") + (os.pathsep + env["PATH"] if env.get("PATH") else "")
    env.update(recipe.env_map)
    return env


def link_mode(target: Path, options: VenvOptions, env: Mapping[str, str]) -> str:
    """uv's link mode for the venv at ``target`` (:func:`share.link_mode`): hard links
    from uv's cache where it, the venv and envforge's store share a file system."""
    store = share.store_dir(paths.state_dir(options.environ))
    return share.link_mode(target.parent, store, _uv_cache(env))


def _uv_cache(env: Mapping[str, str]) -> Path | None:
    """uv's cache folder as uv names it for ``env`` (None: no cache, or uv cannot say)."""
    if env.get("UV_NO_CACHE", "").lower() not in ("", "0", "false", "no", "off"):
        return None
    done = proc.run([lock.uv_bin(), "cache", "dir", "--no-config"], timeout=30.0, env=env)
    text = done.stdout.strip()
    return Path(text) if done.ok and text.startswith("/") else None


def _install(  # noqa: PLR0917 - one step of build, its inputs spelled out
    recipe: Recipe,
    interp: Interpreter,
    target: Path,
    options: VenvOptions,
    lock_file: Path | None,
    stack: Stack,
    *,
    fresh: bool = True,
) -> None:
    """Fill the venv at ``target``: created first when ``fresh``, else (a clone of a
    certified venv, :mod:`.staging`) synced exactly, what the requirements no longer
    name removed. uv runs with a TMPDIR of its own, removed afterwards (uv leaves
    ``uv-setuptools-*.lock`` files where it builds a project with setuptools)."""
    with tempfile.TemporaryDirectory(prefix="envforge-venv-") as tmp:
        env = lock.uv_env(options.ca_bundle, options.environ)
        default = render_options(options).default_index
        if default is not None:  # the default index's mirror; --index-url args still win
            env.update({"UV_INDEX_URL": default, "PIP_INDEX_URL": default})
        private = Path(tmp) / "tmp"
        private.mkdir()
        env.update({"TMPDIR": str(private), "TMP": str(private), "TEMP": str(private)})
        env["UV_LINK_MODE"] = link_mode(target, options, env)
        _fill(recipe, interp, target, options, lock_file, stack, env, Path(tmp), fresh=fresh)


def _fill(  # noqa: PLR0917 - one step of build, its inputs spelled out
    recipe: Recipe,
    interp: Interpreter,
    target: Path,
    options: VenvOptions,
    lock_file: Path | None,
    stack: Stack,
    env: Mapping[str, str],
    tmp: Path,
    *,
    fresh: bool,
) -> None:
    uv = lock.uv_bin()
    if fresh:
        _create(recipe, interp, target, env)
    py = str(venv_python(target))
    plan = plan_venv(recipe, render_options(options), stack)
    sources = lock.source_args(recipe, options.wheelhouse, stack, mirrors_of(options))
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
        argv = _install_argv(py, plan, tmp, options, sources, exact=not fresh)
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
            stack=stack,
        )
    editable = _editable(options.project)
    if editable is not None:
        _install_editable(recipe, py, Path(editable), options, env, sources)
    _install_pip(py, target, options, env, sources)
    bin_dir = target / "bin"
    # replaced, never written through: a clone's files may be links (:mod:`.staging`)
    write_atomically(bin_dir / ENV_SCRIPT, plan.activate_script)
    activate = bin_dir / "activate"
    hook = ACTIVATE_HOOK.format(name=ENV_SCRIPT)
    if activate.is_file():
        text = activate.read_text(encoding="utf-8")
        if hook not in text:
            write_atomically(activate, text + hook)


def _create(recipe: Recipe, interp: Interpreter, target: Path, env: Mapping[str, str]) -> None:
    """``uv venv`` at ``target`` with ``interp`` (never a downloaded one)."""
    made = proc.run(
        [
            lock.uv_bin(),
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


def _install_argv(
    py: str,
    plan: VenvPlan,
    tmp: Path,
    options: VenvOptions,
    sources: list[str],
    *,
    exact: bool,
) -> list[str]:
    """``uv pip install`` of the plan's requirements under its constraints (and the
    project's), written to files in ``tmp``; ``exact``: removing what they do not name."""
    req = tmp / "requirements.txt"
    con = tmp / "constraints.txt"
    # an exact sync keeps the venv's pip (else removed and installed again)
    keep = "pip\n" if exact and (Path(py).parent / "pip").exists() else ""
    req.write_text(plan.requirements_txt + keep, encoding="utf-8")
    project_lines = options.project.constraints if options.project else ()
    con.write_text(
        plan.constraints_txt + "".join(f"{c}\n" for c in project_lines), encoding="utf-8"
    )
    indexed: list[str] = []
    if plan.index_sources:  # the packages from their own index, pinned to it
        (tmp / "indexes").mkdir()
        toml = tmp / "indexes" / "pyproject.toml"
        toml.write_text(plan.index_sources, encoding="utf-8")
        indexed = ["-r", str(toml)]
    return [
        lock.uv_bin(),
        "pip",
        "install",
        "--python",
        py,
        "--no-config",
        *(["--exact"] if exact else []),
        "-r",
        str(req),
        *indexed,
        "-c",
        str(con),
        *sources,
    ]
