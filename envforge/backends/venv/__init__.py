"""The virtualenv backend: a recipe → a certified virtualenv on this host, made with uv.

Where environments live
=======================
``envforge.core.paths.venvs_dir()/<recipe>/<stack tag>-<12 hex of the recipe hash>``, e.g.
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
   target (``uv venv --relocatable``, then ``uv pip install`` — or ``uv pip sync
   --require-hashes`` from the recipe's lock file — by hard links from uv's cache where
   :mod:`.share` allows), check every file against its RECORD hash, probe it there,
   and swap it in (one ``renameat2(RENAME_EXCHANGE)``) when
   the probe passed — or, when it failed, only if there is no certified venv to keep.
   A certified venv therefore stays usable and certified until a new one passes; a
   failure or Ctrl-C removes the folder aside.
   Either way the probe run is kept in the local evidence store
   (:mod:`envforge.evidence.evidence_store`, ``ENVFORGE_HOME/reports``).
5. A project's requirements change (:mod:`.staging`): the folder aside starts as a copy
   of the project's certified venv, the stack's files (torch, its companions, NumPy and
   what they require) hard-linked, and is synced exactly; when every stack distribution
   is byte-identical to the certified one, the probe re-runs only the imports of the new
   or changed distributions and the project's steps, and the certificate says which
   certificate it extends (``envforge certify`` always runs the full probe).

Modules
=======
This package's ``__init__`` is the backend protocol (:class:`envforge.backends.Backend`);
the work is in :mod:`.interpreter` (finding the recipe's Python), :mod:`.layout` (where a
venv lives, its markers, options and results), :mod:`.install` (uv and the install key),
:mod:`.certifying` (probe, certificates, a venv's state), :mod:`.building` (build aside and
swap in), :mod:`.staging` (a project's rebuild from its certified venv), :mod:`.running`
(commands in a venv, signals passed on) and :mod:`.disk` (what the venvs take on disk,
``envforge du`` and ``gc``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from envforge.backends.base import HostCheck, Options, ProbeFailed
from envforge.container.devices import visible_env
from envforge.core import paths
from envforge.core.fsutil import write_atomically
from envforge.errors import (
    CertificationFailed,
    EnvforgeError,
    Unavailable,
)
from envforge.probe.report import ProbeReport
from envforge.recipe.model import Recipe

if TYPE_CHECKING:
    from envforge.host.detect import HostInfo
    from envforge.host.doctor import Finding

from envforge.backends.flags.venv import CLI_OPTIONS, cli_options
from envforge.backends.venv import hostpython
from envforge.backends.venv.building import (
    _reinstall_reason,
    ensure,
    make,
)
from envforge.backends.venv.certifying import (
    VenvState,
    probe_venv,
    problem_of,
    quick_probe,
    recertify,
    state,
    valid_certificate,
)
from envforge.backends.venv.install import (
    install_key,
    venv_environ,
)
from envforge.backends.venv.interpreter import (
    INTERPRETER_TIMEOUT,
    Interpreter,
    find_interpreter,
    query_interpreter,
)
from envforge.backends.venv.layout import (
    ACTIVATE_HOOK,
    BUILD_MARKER,
    CERT_MARKER,
    DEFAULT_OPTIONS,
    ENV_SCRIPT,
    INSTALL_TIMEOUT,
    MARKER_DIR,
    BuildStatus,
    Say,
    VenvBuildResult,
    VenvOptions,
    fingerprint,
    short_hash,
    site_packages,
    venv_location,
    venv_python,
)
from envforge.backends.venv.running import (
    FORWARDED_SIGNALS,
    CommandNotRunnable,
    resolve_command,
    run_forwarding,
    run_in_venv,
)

GIB = 1024**3


#: Rough space a venv takes (site-packages), by vendor: ROCm wheels bundle the
#: user-space ROCm libraries.
SPACE_ESTIMATE: dict[str, int] = {"amd": 16 * GIB, "nvidia": 8 * GIB, "none": 2 * GIB}


def venv_options(options: Options | VenvOptions) -> VenvOptions:
    """This backend's view of a command's :class:`~envforge.backends.base.Options`: the
    ``--gpu`` selection becomes this process's environment plus the visible-devices
    variables in the host's numbering."""
    if isinstance(options, VenvOptions):
        return options
    if options.signing_key is not None:
        options.say(
            "the venv's certificate is not signed; --signing-key signs its in-toto"
            " attestation (.envforge/attestations.intoto.jsonl)"
        )
    extra = options.extra
    environ = options.environ
    if options.gpus is not None:
        base = os.environ if environ is None else environ
        environ = {**base, **visible_env(options.gpus, container=False)}
    return VenvOptions(
        python=extra.get("python"),
        wheelhouse=options.wheelhouse or extra.get("wheelhouse"),
        ca_bundle=options.ca_bundle or extra.get("ca_bundle"),
        index_mirror=options.index_mirror,
        level=options.level,
        step_timeout=options.step_timeout,
        require_free=options.require_free,
        gpu_checks=options.gpu_checks,
        listener=options.listener,
        say=options.say,
        environ=environ,
        project=options.project,
        certify=not extra.get("no_certify", False),
        admit=options.admit,
    )


def build(recipe: Recipe, options: Options | VenvOptions = DEFAULT_OPTIONS) -> VenvBuildResult:
    """:func:`make` the recipe's certified venv. With a command's options, the probe's
    reports are copied to ``report_dir`` (pass or fail), and a probe that did not pass is
    a :class:`~envforge.backends.base.ProbeFailed` carrying the report."""
    if isinstance(options, VenvOptions):
        return make(on_host(recipe, options), options)
    chosen = venv_options(options)
    return _reporting(on_host(recipe, chosen), chosen, options.report_dir, make)


def certify(recipe: Recipe, options: Options | VenvOptions = DEFAULT_OPTIONS) -> VenvBuildResult:
    """:func:`recertify` the recipe's existing venv (reports as :func:`build`)."""
    if isinstance(options, VenvOptions):
        return recertify(on_host(recipe, options), options)
    chosen = venv_options(options)
    return _reporting(on_host(recipe, chosen), chosen, options.report_dir, recertify)


def on_host(recipe: Recipe, options: VenvOptions) -> Recipe:
    """``recipe`` on the Python this host has for it (``hostpython``): the recipe's own,
    or another its torch has wheels for, said once."""
    project = options.project
    chosen, note = hostpython.on_host(
        recipe,
        requires=project.requires_python if project is not None else None,
        explicit=options.python,
        environ=options.environ,
    )
    if note is not None:
        options.say(note)
    return chosen


def _reporting(
    recipe: Recipe,
    options: VenvOptions,
    report_dir: Path | None,
    step: Callable[[Recipe, VenvOptions], VenvBuildResult],
) -> VenvBuildResult:
    markers = venv_location(recipe, options.environ, options.project) / MARKER_DIR
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


def runs_images() -> bool:
    """No: the environment is a folder on the node that builds it."""
    return False


def describe(recipe: Recipe) -> str:
    """The recipe's environment on this backend: its venv folder."""
    return f"venv {venv_location(recipe)}"


def serves(recipe: Recipe, options: Options | VenvOptions = DEFAULT_OPTIONS) -> tuple[bool, str]:
    """The venv backend serves any recipe: it builds the venv when there is none."""
    options = venv_options(options)
    try:
        recipe = on_host(recipe, options)
    except Unavailable as exc:
        return False, exc.one_line()
    current = state(recipe, options.environ, options.project)
    return True, "" if current.certified else f"{current.path} is built first"


def check(
    recipe: Recipe,
    options: Options | VenvOptions = DEFAULT_OPTIONS,
    *,
    step_timeout: float = 30.0,
) -> str | None:
    """Make sure the recipe's venv exists and passes a quick probe now; None, else why not.

    A venv built just now was certified by that build; an existing one is probed again.
    """
    options = venv_options(options)
    try:
        recipe = on_host(recipe, options)
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
    recipe: Recipe, argv: Sequence[str], options: Options | VenvOptions = DEFAULT_OPTIONS
) -> int:
    """Run ``argv`` (default: ``$SHELL``, else bash) in the recipe's certified venv (built
    first if there is none); its exit code."""
    options = venv_options(options)
    recipe = on_host(recipe, options)
    command = list(argv) or [os.environ.get("SHELL") or "bash"]
    path, _fresh = ensure(recipe, options)
    if options.admit is not None:
        from envforge.backends.venv.attesting import attestations_file, certified  # noqa: PLC0415

        options.admit(certified(path)[0].digest, str(path), (attestations_file(path),))
    return run_in_venv(path, recipe, command, options.environ)


__all__ = [
    "ACTIVATE_HOOK",
    "BUILD_MARKER",
    "CERT_MARKER",
    "CLI_OPTIONS",
    "DEFAULT_OPTIONS",
    "ENV_SCRIPT",
    "FORWARDED_SIGNALS",
    "GIB",
    "INSTALL_TIMEOUT",
    "INTERPRETER_TIMEOUT",
    "MARKER_DIR",
    "SPACE_ESTIMATE",
    "BuildStatus",
    "CommandNotRunnable",
    "Interpreter",
    "Say",
    "VenvBuildResult",
    "VenvOptions",
    "VenvState",
    "_reinstall_reason",
    "build",
    "certify",
    "check",
    "cli_options",
    "describe",
    "disk_need",
    "ensure",
    "find_interpreter",
    "findings",
    "fingerprint",
    "install_key",
    "make",
    "probe_venv",
    "problem_of",
    "query_interpreter",
    "quick_probe",
    "recertify",
    "resolve_command",
    "run",
    "run_forwarding",
    "run_in_venv",
    "runs_images",
    "serves",
    "short_hash",
    "site_packages",
    "state",
    "valid_certificate",
    "venv_environ",
    "venv_location",
    "venv_options",
    "venv_python",
]
