"""Probing a venv and recording the verdict: certificates bound to the venv's content, its state."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envforge.backends.venvfs import (
    content_digests,
    describe_changes,
    dist_label,
)
from envforge.backends.venvscan import CERTIFIED_LIST, certified_list
from envforge.core.fsutil import write_files
from envforge.core.sharing import sharing
from envforge.errors import (
    CertificationFailed,
    Interrupted,
    InvalidInput,
    clip,
)
from envforge.probe.report import ProbeReport, StepResult
from envforge.probe.runner import LocalPythonTarget, ProbeListener, run_probe
from envforge.probe.spec import COLLECTIVE_STEP, HEALTH_STEP, CheckFile, GpuChecks, ProbeSpec
from envforge.project.checks import checks_digest
from envforge.publish.certificate import VenvBinding, issue
from envforge.recipe.model import Level, Recipe
from envforge.stack import Stack

if TYPE_CHECKING:
    from envforge.project.model import Project

from envforge.backends.venv import share
from envforge.backends.venv.install import stack_for, venv_environ
from envforge.backends.venv.interpreter import Interpreter
from envforge.backends.venv.layout import (
    BUILD_MARKER,
    CERT_MARKER,
    DEFAULT_OPTIONS,
    MARKER_DIR,
    VenvBuildResult,
    VenvOptions,
    _read_json,
    fingerprint,
    project_binding,
    read_certificate,
    venv_location,
    venv_python,
)
from envforge.evidence.evidence_store import record, sanitized_report
from envforge.project.checks import project_checks


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
    checks: Sequence[CheckFile] = (),
    only: tuple[str, ...] | None = None,
    require_free: float | None = None,
    gpu_checks: GpuChecks | None = None,
    skip_imports: Sequence[tuple[str, str]] = (),
    shown_as: Path | None = None,
    write_bytecode: bool = False,
) -> ProbeReport:
    """Run the probe for ``recipe`` (its ``stack``; None: computed from the recipe) with the
    venv's interpreter and the recipe's env vars; ``checks``: a project's steps; ``only``:
    these of its steps (an incremental certification), None: all. ``write_bytecode``: the
    interpreter writes the bytecode of what the probe imports (a venv certified aside,
    whose certified file list is taken after the probe); otherwise it writes none."""
    spec = ProbeSpec.from_recipe(
        recipe,
        level=level,
        step_timeout=step_timeout,
        extra_checks=extra_checks,
        stack=stack,
        checks=checks,
        skip_imports=skip_imports,
    )
    spec = replace(spec, only=only, require_free=require_free)
    if gpu_checks is not None:
        spec = gpu_checks.applied(spec)
    env = venv_environ(venv, recipe, environ)
    if write_bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    target = LocalPythonTarget(python=str(venv_python(venv)), env=env)
    report = run_probe(spec, target, listener=listener)
    if shown_as is None or shown_as == venv:  # ``shown_as``: where the venv will be
        return report
    return moved_report(report, venv, shown_as)


def moved_report(report: ProbeReport, old: Path, new: Path) -> ProbeReport:
    """``report`` with every mention of the folder ``old`` (a venv built aside: swapped in
    at ``new``, or removed) written as ``new``: in the step details, the target and the
    snapshot. A message never names a folder that no longer exists."""
    before, after = str(old), str(new)

    def moved(value: Any) -> Any:
        if isinstance(value, str):
            return value.replace(before, after)
        if isinstance(value, dict):
            return {k: moved(v) for k, v in value.items()}
        if isinstance(value, list):
            return [moved(v) for v in value]
        return value

    return ProbeReport.from_dict(moved(report.to_dict()))


def _level_ok(certified: Mapping[str, Any], wanted: Level) -> bool:
    have = certified.get("level")
    return have == wanted or (have == "full" and wanted == "quick")


def has_gpu_steps(certified: Mapping[str, Any], checks: GpuChecks | None) -> bool:
    """Whether the certificate's report has the health and collective steps ``checks``
    asks for (a venv certified without them is certified again, in place, to run them)."""
    report = certified.get("report")
    steps = report.get("steps") if isinstance(report, Mapping) else None
    listed = steps if isinstance(steps, list) else []
    names = {s.get("name") for s in listed if isinstance(s, Mapping)}
    asked = (HEALTH_STEP,) * bool(checks and checks.health) + (COLLECTIVE_STEP,) * bool(
        checks and checks.collective
    )
    return all(step in names for step in asked)


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


def full_steps(recipe: Recipe, level: Level, options: VenvOptions, stack: Stack) -> tuple[str, ...]:
    """The steps of the probe :func:`_probe` runs (without ``only``)."""
    spec = ProbeSpec.from_recipe(
        recipe,
        level=level,
        step_timeout=options.step_timeout,
        extra_checks=options.extra_checks,
        stack=stack,
        checks=project_steps(options.project),
    )
    return (options.gpu_checks.applied(spec) if options.gpu_checks else spec).steps


def _probe(  # noqa: PLR0917 - one step of build, its inputs spelled out
    recipe: Recipe,
    venv: Path,
    level: Level,
    options: VenvOptions,
    stack: Stack,
    only: tuple[str, ...] | None = None,
    shown_as: Path | None = None,
    bytecode: bool = False,
) -> ProbeReport:
    if only is None:
        options.say(f"certifying {recipe.name} ({level} probe)")
    else:
        options.say(f"certifying {recipe.name} incrementally ({len(only)} step(s))")
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
            checks=project_steps(options.project),
            only=only,
            skip_imports=options.project.skip_imports if options.project else (),
            shown_as=shown_as,
            require_free=options.require_free,
            gpu_checks=options.gpu_checks,
            write_bytecode=bytecode,
        )
    except Interrupted:
        raise Interrupted(
            f"{recipe.name}: probe interrupted; the worker was stopped and the venv's"
            " certificate is as it was",
            hint=f"run `envforge build {recipe.name} --backend venv` again",
        ) from None
    _keep_evidence(recipe, venv, report, options, incremental=only is not None)
    return report


#: How ``content`` is bound (2: every file of the venv by content, see
#: :mod:`envforge.backends.venvscan`; absent: the lstat data of RECORD's files only).
CONTENT_FORMAT = 2


def project_steps(project: Project | None) -> tuple[CheckFile, ...]:
    """A project's probe steps (its import, its checks); none without a project."""
    if project is None:
        return ()

    return project_checks(project)


def _cert_json(
    recipe: Recipe,
    report: ProbeReport,
    fp: str,
    content: Mapping[str, str],
    project: Project | None = None,
    *,
    incremental: Mapping[str, Any] | None = None,
) -> str:
    """The venv's ``certified.json``: a certificate (format 3) with a venv binding (its
    content, the project and the project's checks: a change certifies again); with
    ``incremental``, what it extends and what was probed again."""
    cert = issue(
        report=report.to_dict(),
        recipe_name=recipe.name,
        recipe_hash=recipe.hash,
        stack_tag=recipe.stack_tag,
        binding=VenvBinding(
            fp, dict(content), CONTENT_FORMAT, project_binding(project), checks_digest(project)
        ),
        skip_imports=project.skip_imports if project is not None else (),
        extra={"incremental": dict(incremental)} if incremental is not None else None,
    )
    return cert.to_json(compact=False) + "\n"


def _marker_json(data: Mapping[str, Any]) -> str:
    return json.dumps(dict(data), indent=2) + "\n"


def valid_certificate(
    recipe: Recipe,
    venv: Path,
    content: Mapping[str, str] | None = None,
    project: Project | None = None,
) -> dict[str, Any] | None:
    """The venv's ``certified.json`` when it holds for ``recipe`` (and ``project``: its
    folder and requirements as they are now) and the venv's content now (``content``:
    :func:`content_digests` already taken); else None."""
    markers = venv / MARKER_DIR
    built = _read_json(markers / BUILD_MARKER)
    cert = read_certificate(venv)
    if built is None or cert is None or cert.get("recipe_hash") != recipe.hash:
        return None
    if cert.get("project") != project_binding(project):
        return None
    if cert.get("content_format") != CONTENT_FORMAT:
        return None
    if project is not None and cert.get("checks") != checks_digest(project):
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
    before = valid_certificate(recipe, target, content, options.project)
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
            (
                markers / CERT_MARKER,
                _cert_json(recipe, report, fp, content, options.project),
                0o644,
            ),
            (markers / CERTIFIED_LIST, certified_list(target), 0o644),
        ]
    )
    return report


def _keep_evidence(
    recipe: Recipe,
    target: Path,
    report: ProbeReport,
    options: VenvOptions,
    *,
    incremental: bool = False,
) -> None:
    """Every venv certification (pass or fail) is kept as evidence (``ENVFORGE_HOME`` of
    ``options.environ``, like the venvs themselves): a certificate bound to the venv's
    fingerprint (its content is bound by the venv's own ``certified.json``), its report
    sanitized (no host or user names); an incremental one says so (its report holds only
    the steps it re-ran)."""
    project = options.project
    cert = issue(
        report=sanitized_report(report.to_dict(), node=sharing(options.environ).node_names),
        recipe_name=recipe.name,
        recipe_hash=recipe.hash,
        stack_tag=recipe.stack_tag,
        binding=VenvBinding(
            fingerprint(target), project=project_binding(project), checks=checks_digest(project)
        ),
        skip_imports=project.skip_imports if project is not None else (),
        extra={"incremental": True} if incremental else None,
    )
    record(cert, environ=options.environ)


def recertify(recipe: Recipe, options: VenvOptions = DEFAULT_OPTIONS) -> VenvBuildResult:
    """Probe the recipe's existing venv again and record the verdict (no install).

    Raises :class:`InvalidInput` when there is no venv yet, :class:`CertificationFailed`
    when the probe did not pass (a certificate the venv had stays) or the venv's files
    changed since they were installed (``build`` reinstalls them).
    """
    started = time.monotonic()
    current = state(recipe, options.environ, options.project)
    if not current.exists:
        raise InvalidInput(
            f"no venv for {recipe.name} at {current.path}",
            hint=f"envforge build {recipe.name} --backend venv"
            + (f" --project {options.project.root}" if options.project else ""),
        )
    built = _read_json(current.path / MARKER_DIR / BUILD_MARKER) or {}
    interp = Interpreter(
        path=str(venv_python(current.path)),
        executable=str(built.get("interpreter") or venv_python(current.path)),
        version=str(built.get("python") or recipe.python),
    )
    level: Level = options.level or recipe.certify.level
    content = content_digests(current.path, shared=share.home_memo(options.environ))
    recorded = built.get("content")
    if recorded != content and not (isinstance(recorded, dict) and _only_added(recorded, content)):
        changed = (
            describe_changes(current.path, recorded) if isinstance(recorded, dict) else None
        ) or "files changed"
        raise CertificationFailed(
            f"{current.path}: its files changed since the install: {changed}",
            hint=f"`envforge build {recipe.name} --backend venv` reinstalls and certifies it",
        )
    report = _recertify_in_place(
        recipe,
        current.path,
        built,
        content,
        level,
        options,
        stack_for(recipe, options.project),
    )
    return VenvBuildResult(
        recipe.name, current.path, "recertified", interp, report, time.monotonic() - started
    )


def _only_added(recorded: Mapping[str, Any], now: Mapping[str, str]) -> tuple[str, ...]:
    """The distributions in ``now`` but not in ``recorded`` when every recorded one is
    unchanged (labels); empty when anything certified changed or nothing was added."""
    if any(now.get(k) != v for k, v in recorded.items()):
        return ()
    return tuple(dist_label(k) for k in sorted(now) if k not in recorded)


def _stale_binding(
    cert: Mapping[str, Any] | None, recipe: Recipe, project: Project | None
) -> str | None:
    """Why ``cert`` (for this recipe) binds something other than what certifying now
    would: an older envforge's content binding, or the project's checks since changed."""
    if cert is None or cert.get("recipe_hash") != recipe.hash:
        return None
    if cert.get("content_format") != CONTENT_FORMAT:
        return "certified by an older envforge (bound to the files' stat data only)"
    if project is not None and cert.get("checks") != checks_digest(project):
        return "the project's checks changed since it was certified"
    return None


@dataclass(frozen=True)
class VenvState:
    path: Path
    exists: bool
    certified: bool
    problem: str | None = None
    #: What changed in the venv's files since it was certified (None: nothing, or it was
    #: never certified for this recipe).
    changed: str | None = None
    #: Only distributions were added since it was certified (``pip install X`` in the
    #: shell), every certified file as it was: usable, the certificate stale. Their
    #: labels (``six 1.17.0``), else empty.
    added: tuple[str, ...] = ()


def state(
    recipe: Recipe, environ: Mapping[str, str] | None = None, project: Project | None = None
) -> VenvState:
    """Whether the recipe's venv exists and is certified, without building anything.

    Certified means: a ``certified.json`` for this recipe hash whose content digests
    (:func:`~envforge.backends.venvfs.content_digests`) are those of the venv now.
    """
    target = venv_location(recipe, environ, project)
    if not venv_python(target).exists():
        return VenvState(target, False, False)
    markers = target / MARKER_DIR
    content = content_digests(target, shared=share.home_memo(environ))
    if valid_certificate(recipe, target, content, project) is not None:
        return VenvState(target, True, True)
    cert = read_certificate(target)
    if cert is not None and cert.get("project") != project_binding(project):
        return VenvState(
            target, True, False, "the project's requirements changed since it was certified"
        )
    stale = _stale_binding(cert, recipe, project)
    if stale is not None:  # built again (certified again) when used
        return VenvState(target, True, False, stale)
    if cert is not None and cert.get("recipe_hash") == recipe.hash:
        recorded = cert.get("content")
        if isinstance(recorded, dict) and recorded != content:
            added = _only_added(recorded, content)
            if added:
                return VenvState(
                    target,
                    True,
                    False,
                    "installed since certified: " + ", ".join(added),
                    added=added,
                )
            changed = describe_changes(target, recorded) or "files changed"
            return VenvState(target, True, False, f"changed since certified: {changed}", changed)
    last = _read_json(markers / "probe.json")
    steps = [StepResult.from_dict(s) for s in (last or {}).get("steps", []) if isinstance(s, dict)]
    bad = next((s for s in steps if s.status not in ("pass", "warn", "skip")), None)
    problem = f"last probe: {bad.name} {bad.status}" if bad else "not certified"
    return VenvState(target, True, False, problem)


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


def problem_of(report: ProbeReport) -> str:
    bad = report.first_problem
    if bad is None:
        return "the probe did not pass"
    detail = f" ({clip(bad.detail, 300)})" if bad.detail else ""
    return f"{bad.name}: {bad.status}{detail}"
