"""Building a recipe's venv aside and swapping it in only when its probe passed."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envforge import lock
from envforge.backends.venv import share
from envforge.backends.venv.certifying import (
    CONTENT_FORMAT,
    _cert_json,
    _failure,
    _level_ok,
    _marker_json,
    _probe,
    _recertify_in_place,
    full_steps,
    has_gpu_steps,
    state,
    valid_certificate,
)
from envforge.backends.venv.install import _install, install_key, mirrors_of, stack_for
from envforge.backends.venv.interpreter import Interpreter, find_interpreter
from envforge.backends.venv.layout import (
    BUILD_MARKER,
    CERT_MARKER,
    DEFAULT_OPTIONS,
    MARKER_DIR,
    BuildStatus,
    VenvBuildResult,
    VenvOptions,
    _read_json,
    fingerprint,
    project_binding,
    read_certificate,
    remembered,
    venv_location,
    venv_python,
)
from envforge.backends.venv.staging import (
    Base,
    Incremental,
    clone,
    incremental_record,
    plan_incremental,
    rebuild_base,
)
from envforge.backends.venvfs import (
    aside_prefix,
    content_digests,
    describe_changes,
    swap_dirs,
    sweep_leftovers,
    verify_records,
)
from envforge.backends.venvscan import (
    CERTIFIED_LIST,
    certified_list,
    refresh_memo,
    restat,
    save_memo,
    scan,
)
from envforge.core import paths
from envforge.core.fsutil import (
    check_folder_target,
    make_dirs,
    make_temp_dir,
    write_atomically,
    writing,
)
from envforge.errors import (
    BuildFailed,
    CertificationFailed,
    EnvforgeError,
    Unavailable,
)
from envforge.host.syspkg import missing_packages
from envforge.probe.report import ProbeReport
from envforge.project.resolve import current_lock
from envforge.recipe.model import Level, Recipe
from envforge.stack import Stack
from envforge.version import __version__


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
    if built.get("content_format") != CONTENT_FORMAT:
        return "made by an older envforge (its files bound by stat data only)", {}
    content = content_digests(target)  # by content: a touched file is not a change
    recorded = built.get("content")
    if recorded == content:
        return None, content
    if built.get("fingerprint") != fingerprint(target):
        return "the installed set changed", content
    changed = describe_changes(target, recorded) if isinstance(recorded, dict) else None
    return f"files changed since the install: {changed or 'content differs'}", content


def make(recipe: Recipe, options: VenvOptions = DEFAULT_OPTIONS) -> VenvBuildResult:
    """Build (or confirm) the certified venv for ``recipe``; see the package docstring.

    Raises :class:`Unavailable` (no interpreter, index unreachable), :class:`BuildFailed`
    (uv failed) or :class:`CertificationFailed` (the probe did not pass: a certified venv
    that was there stays as it was; without one the new venv stays, uncertified).
    """
    started = time.monotonic()
    where = venv_location(recipe, options.environ, options.project)
    options = remembered(options, _read_json(where / MARKER_DIR / BUILD_MARKER), where)
    lock.check_inputs(options.wheelhouse, options.ca_bundle)
    interp = find_interpreter(recipe.python, explicit=options.python, environ=options.environ)
    _check_system_packages(recipe, options)
    project = options.project
    stack = stack_for(recipe, project)
    lock.check_wheelhouse(stack, options.wheelhouse)
    lock_file = _lock_for(recipe, stack, options)
    key = install_key(recipe, interp, options, lock_file, stack)
    target = venv_location(recipe, options.environ, project)
    markers = target / MARKER_DIR
    level: Level = options.level or recipe.certify.level
    make_dirs(target.parent)
    check_folder_target(target)  # a device, FIFO or file there is refused, never swapped
    for gone in sweep_leftovers(target.parent):
        options.say(f"removed {gone}, left by an envforge that was stopped")

    built = _read_json(markers / BUILD_MARKER)
    why, content = _reinstall_reason(target, built, key, options)
    if why is None and built is not None and not options.certify:
        cert = valid_certificate(recipe, target, content, project)
        return VenvBuildResult(
            recipe.name,
            target,
            "uncertified" if cert is None else "up-to-date",
            interp,
            None,
            time.monotonic() - started,
            lock_file,
        )
    if why is None and built is not None:
        cert = valid_certificate(recipe, target, content, project)
        if (
            cert is not None
            and not options.extra_checks
            and _level_ok(cert, level)
            and has_gpu_steps(cert, options.gpu_checks)
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
        options.say(f"{target}: installed set unchanged; certifying")
        report = _recertify_in_place(recipe, target, built, content, level, options, stack)
        return VenvBuildResult(
            recipe.name,
            target,
            "recertified",
            interp,
            report,
            time.monotonic() - started,
            lock_file,
        )

    status: BuildStatus = "built" if why == "new" and not target.exists() else "reinstalled"
    if status == "reinstalled":
        options.say(
            f"{target}: reinstalling ({why}); the current venv stays until the new one passes"
        )
    base = (
        rebuild_base(recipe, target, interp, project)
        if why == "the install inputs changed"
        else None
    )
    if isinstance(base, str):
        if project is not None:
            options.say(f"a new venv, torch installed again: {base}")
        base = None
    made = _build_aside(recipe, interp, target, key, lock_file, level, options, stack, base)
    if made is None:
        status = "uncertified"
    incremental = made is not None and "incremental" in (read_certificate(target) or {})
    return VenvBuildResult(
        recipe.name,
        target,
        status,
        interp,
        made,
        time.monotonic() - started,
        lock_file,
        incremental,
    )


def _check_system_packages(recipe: Recipe, options: VenvOptions) -> None:
    """A venv uses the host's system libraries: each ``system_packages`` entry (the
    recipe's and the project's) must be installed here (:class:`Unavailable`, exit 4,
    naming the missing ones and the apt command); a host without dpkg-query is said so,
    not refused."""
    project = options.project
    wanted = tuple(
        dict.fromkeys((*recipe.system_packages, *(project.system_packages if project else ())))
    )
    if not wanted:
        return
    who = (
        recipe.name
        if not project or not project.system_packages
        else (f"{recipe.name} with the project {project.name}")
    )
    missing = missing_packages(wanted, options.environ)
    if missing is None:
        options.say(
            f"note: cannot check the system packages here (no dpkg-query):"
            f" {who} needs {', '.join(wanted)}"
        )
    elif missing:
        raise Unavailable(
            f"{who} needs system packages this host lacks: {', '.join(missing)}",
            hint=f"apt-get install {' '.join(missing)} (as root), then build again",
        )


def _lock_for(recipe: Recipe, stack: Stack, options: VenvOptions) -> Path | None:
    """The lock the build installs exactly: the project's for this recipe when it matches
    the project now, else the recipe's own when it matches the recipe; None otherwise."""
    if not options.use_lock:
        return None
    if options.project is not None:
        found = current_lock(options.project, recipe, stack)
        if found is None:
            options.say(
                f"no current project lock: resolving; `envforge lock {recipe.name}"
                f" --project {options.project.root}` pins it"
            )
        return found
    stale = lock.stale_lock(recipe, stack)
    if stale is not None:
        options.say(
            f"note: ignoring stale lock {stale} (the recipe changed):"
            f" run `envforge lock {recipe.name}`"
        )
    return lock.lock_path(recipe, stack)


def _build_aside(  # noqa: PLR0917 - one step of build, its inputs spelled out
    recipe: Recipe,
    interp: Interpreter,
    target: Path,
    key: str,
    lock_file: Path | None,
    level: Level,
    options: VenvOptions,
    stack: Stack,
    base: Base | None = None,
) -> ProbeReport | None:
    """Install and probe a new venv in ``.<name>.tmp-<owner>-XXXX`` beside ``target``; swap
    it in when it passed, or when there is no certified venv to keep (without probing it
    when ``options.certify`` is False: None then). With a ``base`` (:mod:`.staging`) the
    folder aside starts as a copy of the certified venv, the stack's files kept, and is
    synced exactly. The folder aside is removed in every other outcome (failure, Ctrl-C);
    one left by a killed envforge is swept by the next build."""
    aside = make_temp_dir(aside_prefix(target), target.parent)
    try:
        content, base = _stage(recipe, interp, aside, lock_file, options, stack, base)
        fp = fingerprint(aside)
        build_data = {
            "recipe": recipe.name,
            "recipe_hash": recipe.hash,
            "stack_tag": recipe.stack_tag,
            "install_key": key,
            "fingerprint": fp,
            "content": content,
            "content_format": CONTENT_FORMAT,
            "python": interp.version,
            "interpreter": interp.executable,
            "lock": str(lock_file) if lock_file else None,
            "project": project_binding(options.project),
            # the project's folder: `envforge gc` removes the venv once it is gone
            "project_root": str(options.project.root) if options.project else None,
            "envforge_version": __version__,
            # how it was built, for a `certify` elsewhere (a compute node) and for people
            "certify": options.certify,
            "sources": lock.source_args(recipe, options.wheelhouse, stack, mirrors_of(options)),
            "ca_bundle": str(options.ca_bundle.resolve()) if options.ca_bundle else None,
            # what a rebuild reuses when not told otherwise (layout.remembered)
            "wheelhouse": str(options.wheelhouse.resolve()) if options.wheelhouse else None,
            "index_mirror": options.index_mirror,
        }
        aside_markers = aside / MARKER_DIR
        write_atomically(aside_markers / BUILD_MARKER, _marker_json(build_data))
        if not options.certify:
            _swap_in(aside, target)
            return None
        report, now = _certify_aside(
            recipe, aside, fp, content, level, options, stack, base, target=target
        )
        if now != content:  # the probe's bytecode: build.json says what is installed
            build_data["content"] = now
            write_atomically(aside_markers / BUILD_MARKER, _marker_json(build_data))
        # only a failed probe asks whether a certified venv is there to keep (reading
        # it: its shared files' link counts, so its memo, changed with this build)
        old = (
            valid_certificate(recipe, target, None, options.project)
            if not report.passed and venv_python(target).exists()
            else None
        )
        if old is not None:
            # Keep the certified venv; the failed probe is its last probe run.
            report.write(target / MARKER_DIR)
            kept = f"{target} stays as it was, certified ({old.get('level')} probe)"
            raise _failure(recipe, target, report, kept=kept, rebuilt=True)
        _swap_in(aside, target)
        if not report.passed:
            raise _failure(recipe, target, report, kept=None)
        return report
    finally:
        if os.path.lexists(aside):
            shutil.rmtree(aside, ignore_errors=True)


def _stage(  # noqa: PLR0917 - one step of build, its inputs spelled out
    recipe: Recipe,
    interp: Interpreter,
    aside: Path,
    lock_file: Path | None,
    options: VenvOptions,
    stack: Stack,
    base: Base | None,
) -> tuple[dict[str, str], Base | None]:
    """Fill the folder aside (a new venv, or a clone of ``base`` synced exactly) and check
    its files against their RECORD hashes (a clone's hard-linked stack files are the
    certified ones: not read again); its content digests, and the base it started from
    (None: a new venv)."""
    if base is not None:
        try:
            linked = clone(base, aside)
        except OSError as exc:  # no hard links on this file system, a full disk, ...
            options.say(
                f"a new venv, torch installed again: cloning {base.path} failed"
                f" ({exc.strerror or exc})"
            )
            base = None
            shutil.rmtree(aside, ignore_errors=True)
            os.mkdir(aside, 0o700)
        else:
            options.say(
                f"starting from the certified {base.path}: the stack's files kept"
                f" ({linked} entries linked), the requirements synced"
            )
    if base is None:
        options.say(f"creating {aside} with Python {interp.version} ({interp.executable})")
        shutil.rmtree(aside)  # uv venv wants to create the folder itself
    _install(recipe, interp, aside, options, lock_file, stack, fresh=base is None)
    store = share.store_dir(paths.state_dir(options.environ))
    just_read: dict[str, tuple[str, str]] = {}
    shared = share.link_shared(aside, store, just_read)  # checked below, with the rest
    # every file read (a clone's carried-over files too: never trusted by stat data); the
    # store's files linked above were read, and their bytes checked, a moment ago
    found = scan(aside, use_memo=False, just_read=just_read)
    (aside / MARKER_DIR).mkdir(exist_ok=True)
    content = found.digests()
    old = base.cert.get("content") if base is not None else None
    only = (
        None
        if not isinstance(old, dict)
        else [d for d, digest in content.items() if old.get(d) != digest]
    )
    corrupt = verify_records(aside, only=only, hashes=found.files)
    if corrupt:
        more = f" (+{len(corrupt) - 1} more)" if len(corrupt) > 1 else ""
        raise BuildFailed(
            f"the installed files do not match their RECORD hashes: {corrupt[0]}{more}",
            hint="uv's cache or envforge's store of shared files holds a modified copy: "
            f"`uv cache clean` and remove {store}, then build again",
        )
    copied: list[str] = []
    try:
        added = share.add_to_store(aside, store, copied)
    except OSError as exc:
        raise BuildFailed(
            f"cannot keep the venv's files apart from uv's cache: {exc.strerror or exc}",
            hint=f"free space where {store} and the venv are, then build again",
        ) from exc
    save_memo(aside, restat(aside, found, copied))  # the store's links: the same bytes
    if shared or added:
        options.say(f"files shared with other venvs: {shared} linked, {added} added ({store})")
    return content, base


def _certify_aside(  # noqa: PLR0917 - one step of build, its inputs spelled out
    recipe: Recipe,
    aside: Path,
    fp: str,
    content: Mapping[str, str],
    level: Level,
    options: VenvOptions,
    stack: Stack,
    base: Base | None,
    *,
    target: Path,
) -> tuple[ProbeReport, dict[str, str]]:
    """Probe the folder aside (incrementally when it was built from ``base`` and the stack
    is the certified one) and write its certificate there on a pass. The report names
    ``target``, where the folder aside goes (or is removed), never the folder aside.
    Also its content digests after the probe, which wrote the bytecode of what it
    imported (certified with its source; kept in build.json also when it failed, for an
    uncertified venv swapped in)."""
    plan: Incremental | str | None = None
    if base is not None:
        plan = plan_incremental(
            base,
            aside,
            content,
            level=level,
            project=options.project,
            steps=full_steps(recipe, level, options, stack),
        )
        if isinstance(plan, str):
            options.say(f"full probe: {plan}")
    only = plan.steps if isinstance(plan, Incremental) else None
    # the probe writes the bytecode of what it imports: certified with the rest below
    report = _probe(recipe, aside, level, options, stack, only=only, shown_as=target, bytecode=True)
    markers = aside / MARKER_DIR
    report.write(markers)
    found = scan(aside)  # one walk for the digests and the certified list
    save_memo(aside, found)
    now = found.digests()
    if report.passed:
        extends = (
            incremental_record(base, plan)
            if base is not None and isinstance(plan, Incremental)
            else None
        )
        write_atomically(
            markers / CERT_MARKER,
            _cert_json(recipe, report, fp, now, options.project, incremental=extends),
        )
        write_atomically(markers / CERTIFIED_LIST, certified_list(aside, found))
    return report, now


def _swap_in(aside: Path, target: Path) -> None:
    """Put the folder built aside at ``target`` in one step; remove what was there."""
    with writing(target):
        previous = swap_dirs(aside, target)
    if previous is not None:
        shutil.rmtree(previous, ignore_errors=True)
        # files shared with it (hard links) changed link count, so ctime: the memo the
        # build wrote a moment ago is brought up to date now, not read again by a shell
        refresh_memo(target)


#: Marker of the packages a stale venv was last said to have (said once per change).
STALE_NOTED = "stale-noted.json"


def _note_stale(recipe: Recipe, path: Path, added: tuple[str, ...], options: VenvOptions) -> None:
    """Say once (per set of added packages) that the certificate no longer covers them."""
    marker = path / MARKER_DIR / STALE_NOTED
    if _read_json(marker) == {"added": list(added)}:
        return
    options.say(
        f"note: {', '.join(added)} installed since {path} was certified: its certificate is"
        f" stale; `envforge certify {recipe.name} --backend venv` certifies what is there now"
    )
    # a read-only venv (fsutil's error for it): the note comes again next time
    with contextlib.suppress(EnvforgeError):
        write_atomically(marker, _marker_json({"added": list(added)}))


def ensure(recipe: Recipe, options: VenvOptions = DEFAULT_OPTIONS) -> tuple[Path, bool]:
    """The recipe's certified venv, built first when there is none: (path, just built).

    An existing certified venv is used as it is, whatever options built it (a shell does
    not rebuild because ``--wheelhouse`` is not given this time). One where packages were
    only added since (``pip install X``) is used too, saying once that its certificate is
    stale; one whose certified files changed is refused.
    """
    current = state(recipe, options.environ, options.project)
    if current.certified:
        return current.path, False
    if current.added:
        _note_stale(recipe, current.path, current.added, options)
        return current.path, False
    built = _read_json(current.path / MARKER_DIR / BUILD_MARKER) if current.exists else None
    if built is not None and built.get("certify") is False:
        raise CertificationFailed(
            f"{current.path} was built without certification (--no-certify): not certified",
            hint=f"`envforge certify {recipe.name} --backend venv` on a host with the GPU"
            " certifies it (no flags needed)",
        )
    if current.changed is not None:
        raise CertificationFailed(
            f"{current.path} changed since it was certified: {current.changed}",
            hint=f"`envforge build {recipe.name} --backend venv` re-certifies it,"
            " reinstalling what changed",
        )
    return make(recipe, options).path, True
