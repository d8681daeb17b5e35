"""Installing a recipe's requirement set into a venv with uv; the install key."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from envforge import lock, proc
from envforge.recipe.model import Recipe
from envforge.render import RenderOptions, plan_venv
from envforge.stack import Stack, stack_of

if TYPE_CHECKING:
    pass

#: Seconds one ``uv`` install may run (a ROCm torch wheel is several GB).

from envforge.backends.venv.interpreter import Interpreter
from envforge.backends.venv.layout import (
    ACTIVATE_HOOK,
    ENV_SCRIPT,
    INSTALL_TIMEOUT,
    LINK_MODE,
    VenvOptions,
    venv_python,
)


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
