"""Options and helpers shared by the CLI command modules (each option declared once)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

from envforge.core.lazy import LazyModule
from envforge.core.patterns import LEVELS, Level, strict_from_env
from envforge.errors import InvalidInput

if TYPE_CHECKING:
    from envforge.core.settings import Settings
    from envforge.evidence.signed import SignedPolicy
    from envforge.host.detect import HostInfo
    from envforge.project.model import Project
    from envforge.publish.signing import SigningKey, TrustList
    from envforge.recipe.model import Recipe
    from envforge.solve.choose import Choice

#: Imported when a command takes a platform (``--help`` and ``list`` load nothing of the
#: knowledge package).
_platforms = LazyModule("envforge.knowledge.platforms")

#: Imported when a key is used (it loads cryptography).
_signing = LazyModule("envforge.publish.signing")
#: :mod:`envforge.solve.choose`, imported for ``auto`` or a GPU named as RECIPE (a recipe
#: named or a path loads neither the solver nor host detection).
solver = LazyModule("envforge.solve.choose")
#: Imported when a command runs: the network deadline, the recipe catalogue (YAML).
_net = LazyModule("envforge.core.net")
_catalogue = LazyModule("envforge.recipe.catalogue")

F = TypeVar("F", bound=Callable[..., Any])


def note(text: str, *, tagged: bool = False) -> None:
    """A progress or status line on stderr (``tagged``: prefixed ``envforge:``)."""
    click.echo(f"envforge: {text}" if tagged else text, err=True)


def say(text: str) -> None:
    """``note(text, tagged=True)``, for callbacks that take one argument."""
    note(text, tagged=True)


# --------------------------------------------------------------------------- options


def set_option(func: F) -> F:
    """``--set key.path=value`` (repeatable): override any recipe key, value as YAML."""
    return click.option(
        "--set",
        "overrides",
        multiple=True,
        metavar="KEY.PATH=VALUE",
        help="Override a recipe key (repeatable; the value is parsed as YAML).",
    )(func)


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print data as JSON.")(func)


def _resolve_deadline(_ctx: object, _param: object, value: float | None) -> float:
    try:
        seconds: float = _net.deadline_seconds(value)
    except ValueError as exc:
        hint = f"unset {_net.DEADLINE_ENV} or pass --deadline"
        raise InvalidInput(str(exc), hint=hint) from None
    return seconds


def deadline_option(help: str) -> Callable[[F], F]:
    """``--deadline SECONDS`` for a network command, resolved before any work: the value
    given, else ``$ENVFORGE_NET_DEADLINE``, else 45 (a bad variable is exit 2 naming it)."""
    return click.option(
        "--deadline",
        type=click.FloatRange(min=0.1, max=86400),
        default=None,
        callback=_resolve_deadline,
        metavar="SECONDS",
        help=help + " Default: $ENVFORGE_NET_DEADLINE, else 45.",
    )


def wheelhouse_option(help: str) -> Callable[[F], F]:
    """``--wheelhouse DIR`` (must exist)."""
    return click.option(
        "--wheelhouse",
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        help=help,
    )


def index_mirror_option(func: F) -> F:
    """``--index-mirror TEXT``: the default index's mirror and/or ORIGINAL=MIRROR pairs."""
    return click.option(
        "--index-mirror",
        metavar="URL|PAIRS",
        default=None,
        help="Install through this index mirror: a URL in place of the default index "
        "and/or ORIGINAL=MIRROR pairs for the indexes a recipe names (default: "
        "ENVFORGE_INDEX_MIRROR, the settings; '' for none).",
    )(func)


def ca_bundle_option(help: str) -> Callable[[F], F]:
    """``--ca-bundle FILE`` (must exist)."""
    return click.option(
        "--ca-bundle",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help=help,
    )


def _check_shm_size(_ctx: object, _param: object, value: str | None) -> str | None:
    if value is None:
        return None
    if not re.fullmatch(r"[1-9][0-9]*[bkmgBKMG]?", value):
        raise click.BadParameter(f"{value!r} is not a size (a number with b, k, m or g: 16g)")
    return value.lower()


def parse_level(value: str | None) -> Level | None:
    """A ``--level`` value as the :data:`Level` literal (click has checked the choice)."""
    for level in LEVELS:
        if value == level:
            return level
    return None


def level_option(help: str) -> Callable[[F], F]:
    """``--level quick|full``, passed on as a :data:`Level` (None: not given)."""
    return click.option(
        "--level",
        type=click.Choice(LEVELS),
        default=None,
        callback=lambda _ctx, _param, value: parse_level(value),
        help=help,
    )


def step_timeout_option(help: str, metavar: str | None = None) -> Callable[[F], F]:
    return click.option("--step-timeout", type=float, default=None, metavar=metavar, help=help)


class OutputPath(click.Path):
    """Where an output is written (``-o``, ``--write``, ``--report``, ``--summary``): never an
    empty value, which ``Path`` would take as the current folder (``-o ""``, an unset
    ``$VAR``) and write there unasked; ``.`` says so. The target itself is checked by
    :mod:`envforge.core.fsutil` (one line, exit 2)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(path_type=Path, **kwargs)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail("is empty: name a file or folder (. for the current folder)", param, ctx)
        return super().convert(value, param, ctx)


def report_option(help: str, metavar: str | None = None) -> Callable[[F], F]:
    return click.option(
        "--report",
        "report_dir",
        type=OutputPath(),  # checked by fsutil.check_folder_target: one line
        metavar=metavar,
        help=help,
    )


def signing_key_option(func: F) -> F:
    """``--signing-key PATH`` (or ``ENVFORGE_SIGNING_KEY``): sign the certificates."""
    return click.option(
        "--signing-key",
        "signing_key",
        type=click.Path(path_type=Path),  # read by envforge.publish.signing: one-line errors
        envvar="ENVFORGE_SIGNING_KEY",
        metavar="PATH",
        default=None,
        help="Sign each certificate with this ed25519 key (envforge keys generate; "
        "default: $ENVFORGE_SIGNING_KEY).",
    )(func)


def signing_key_ref_option(func: F) -> F:
    """``fleet plan --signing-key PATH|env:NAME``: the nodes' key, by reference
    (:mod:`envforge.fleet.signing_ref`); no environment default (the planner's own key
    path means nothing on a node)."""
    return click.option(
        "--signing-key",
        "signing_key",
        default="",
        metavar="PATH|env:NAME",
        help="Key each task signs with, by reference: a key file's absolute path on the "
        "nodes, or env:NAME (the nodes' variable holding its path or the PEM key); never "
        "copied into the plan's folder.",
    )(func)


def summary_option(func: F) -> F:
    """``--summary FILE``: append a Markdown summary (for ``$GITHUB_STEP_SUMMARY``)."""
    return click.option(
        "--summary",
        "summary_file",
        type=OutputPath(),
        metavar="FILE",
        default=None,
        help="Append a Markdown summary (status, steps, the failing step's detail) to FILE, "
        "e.g. $GITHUB_STEP_SUMMARY.",
    )(func)


def trust_option(help: str) -> Callable[[F], F]:
    """``--trust PUBFILE`` (repeatable; default: ``ENVFORGE_TRUSTED_KEYS``)."""
    return click.option(
        "--trust",
        "trust",
        multiple=True,
        type=click.Path(path_type=Path),
        metavar="PUBFILE",
        help=help,
    )


def require_signed_option(func: F) -> F:
    """``--require-signed``: only evidence signed by a trusted key counts."""
    return click.option(
        "--require-signed",
        "require_signed",
        is_flag=True,
        help="Count only evidence signed by a trusted key (--trust, $ENVFORGE_TRUSTED_KEYS); "
        "default: $ENVFORGE_REQUIRE_SIGNED=1. Without it unsigned evidence is labelled unsigned.",
    )(func)


def signed_policy(require_signed: bool, trust: Sequence[Path]) -> SignedPolicy:
    """The signed-evidence policy of a command's ``--require-signed`` and ``--trust``
    (defaults from the environment); exit 2 when it is required with no trusted key."""
    from envforge.evidence.signed import (  # noqa: PLC0415 - evidence commands only
        REQUIRE_ENV,
        SignedPolicy,
        required_by,
    )

    required = required_by(require_signed, os.environ)
    if not (required or trust or os.environ.get("ENVFORGE_TRUSTED_KEYS", "").strip()):
        return SignedPolicy()  # nothing to check: show stays light
    files, setting = trusted_files(trust)
    names: dict[str, str] = {}
    if files:
        keys: TrustList = _signing.load_trust(files, setting=setting)
        names = {fp: key.name for fp, key in keys.keys.items()}
    how = "--require-signed" if require_signed else f"{REQUIRE_ENV}=1"
    return SignedPolicy.of(required, names, setting=how)


def python_option(help: str) -> Callable[[F], F]:
    return click.option("--python", "python", metavar="PATH", default=None, help=help)


def gpu_option(func: F) -> F:
    """``--gpu INDEX[,INDEX]|all``: the GPUs to use, in ``envforge detect``'s numbering."""
    return click.option(
        "--gpu",
        "gpu",
        metavar="INDEX[,INDEX]|all",
        default=None,
        help="Use only these GPUs (envforge detect numbers them): AMD by ROCR_VISIBLE_DEVICES "
        "and only their render nodes, NVIDIA by device request and CUDA_VISIBLE_DEVICES; "
        "NPROC_PER_NODE counts them. GPUs of different archs cannot be mixed.",
    )(func)


def root_option(func: F) -> F:
    return click.option(
        "--root",
        type=click.Path(file_okay=False, path_type=Path),
        default=Path("/"),
        show_default=True,
        help="Read sys/, proc/ and dev/ under ROOT (a fixture tree or a mounted host); "
        "tools such as rocminfo run only for /.",
    )(func)


def host_platform() -> str:
    """This host's platform in docker's names (``linux/amd64``, ``linux/arm64``)."""
    found: str = _platforms.host_platform()
    return found


def platform_option(func: F) -> F:
    """``--platform linux/amd64|linux/arm64``: the wheels' (and image's) platform."""
    return click.option(
        "--platform",
        "platform",
        type=click.Choice(_platforms.PLATFORMS),
        default=None,
        help="Wheel and image platform (default: this host's).",
    )(func)


#: ``ctx.meta`` key set by ``--strict`` (the meta dict is shared by the group and command).
STRICT_META = "envforge.strict"


def _set_strict(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.meta[STRICT_META] = True


def strict_option(func: F) -> F:
    """``--strict`` (on the group or a command; also ``ENVFORGE_STRICT=1``): a stack the
    compatibility table has no row for is refused (exit 2) instead of warned about."""
    return click.option(
        "--strict",
        is_flag=True,
        expose_value=False,
        callback=_set_strict,
        help="Refuse stacks the compatibility table has no row for (unknown release, "
        "variant or index) instead of warning (also ENVFORGE_STRICT=1; for CI).",
    )(func)


def strict_mode() -> bool:
    """``--strict`` was given (group or command) or ``ENVFORGE_STRICT=1`` is set."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.meta.get(STRICT_META)) or strict_from_env()


# --------------------------------------------------------------------------- recipes


def load_checked(ref: str, overrides: Sequence[str] = (), *, platform: str | None = None) -> Recipe:
    """Load a recipe by name or path (or a GPU's: envforge.solve.choose.load_named), refused
    if the table does for ``platform`` (``--platform``; None: this host's); what the table
    has no row for is a one-line warning on stderr (a refusal under strict)."""
    catalogue = _catalogue.Catalogue.default()
    if ref in catalogue.files() or os.sep in ref or ref.endswith((".yaml", ".yml")):
        recipe = catalogue.load(ref, overrides)
    else:  # a GPU or an arch by name ("RX 7900 XTX", gfx1012), else the catalogue's error
        recipe = solver.load_named(ref, overrides, catalogue, say=say)
    return _enforced(recipe, platform)


def load_for_host(
    ref: str,
    host: HostInfo | None = None,
    overrides: Sequence[str] = (),
    *,
    platform: str | None = None,
) -> tuple[Recipe, Choice | None]:
    """The one way a command loads RECIPE|auto: ``auto`` → the recipe
    :func:`envforge.solve.choose.choose` picks for ``host`` (detected when None), said on
    stderr in one line; anything else → that recipe. Either is checked against the
    compatibility table for ``platform`` (None: this host's)."""
    if ref != "auto":
        return load_checked(ref, overrides, platform=platform), None
    choice = auto_choice(host)
    if choice.predicted and strict_mode():
        from envforge.solve.predict import Predicted  # noqa: PLC0415 - only for auto

        raise Predicted(
            f"--strict: auto -> {choice.recipe}: its solved stack is predicted, not verified: "
            f"{choice.predicted}",
            hint=f"drop --strict (ENVFORGE_STRICT), or add a row for {choice.arch} to the table",
        )
    return _enforced(solver.load_choice(choice, overrides), platform), choice


def detect_host() -> HostInfo:
    """This host's GPUs (:func:`envforge.host.detect.detect`), for ``auto`` only."""
    from envforge.host.detect import detect  # noqa: PLC0415 - host detection only for auto

    return detect()


def _enforced(recipe: Recipe, platform: str | None) -> Recipe:
    """``recipe``, refused if the table does for ``platform`` (None: this host's); what
    the table has no row for is a one-line warning on stderr (a refusal under strict)."""
    from envforge.knowledge import enforce  # noqa: PLC0415 - the table only when needed

    enforce(recipe, strict=strict_mode(), platform=platform or host_platform())
    return recipe


def auto_choice(host: HostInfo | None = None) -> Choice:
    """What ``auto`` means on ``host`` (detected when None), said on stderr in one line."""
    choice: Choice = solver.choose(host if host is not None else detect_host())
    say(f"auto -> {choice.recipe}: {choice.reason}")
    return choice


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


# --------------------------------------------------------------------------- signing, Ctrl-C


def load_signer(path: Path | None) -> SigningKey | None:
    """The ``--signing-key`` / ``ENVFORGE_SIGNING_KEY`` key, loaded before any work; None
    without one (and cryptography is not loaded: a probe without a key needs none)."""
    if path is None or not str(path):
        return None
    key: SigningKey | None = _signing.load_signer(path, say=say)
    return key


@contextlib.contextmanager
def term_as_interrupt() -> Iterator[None]:
    """While the block runs, SIGTERM and SIGHUP stop what it started like Ctrl-C does: the
    ``finally`` blocks run (child process groups stopped, containers and folders built
    aside removed), then exit 130 with ``envforge: interrupted``. Every command runs under
    it (:func:`envforge.cli.main`); ``shell`` replaces it while its command runs (the
    signals go on to the command)."""

    def handler(signum: int, frame: object) -> None:
        del signum, frame
        raise KeyboardInterrupt

    try:
        previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


# --------------------------------------------------------------------------- projects


def project_option(func: F) -> F:
    """``--project DIR`` and ``--extra NAME``: a project's requirements on the stack."""
    func = click.option(
        "--extra",
        "extras",
        multiple=True,
        metavar="NAME",
        help="With --project: also install the project's optional dependencies NAME.",
    )(func)
    return click.option(
        "--project",
        "project_dir",
        metavar="DIR",
        type=click.Path(path_type=Path, file_okay=False),
        help="A project folder (pyproject.toml or requirements.txt) to put on the stack.",
    )(func)


def recipe_ref_for(ref: str | None, project: Project | None) -> str:
    """RECIPE as given, else the project's ``[tool.envforge] recipe``, else ``auto``
    for a project; without either, exit 2."""
    if ref is not None:
        return ref
    if project is not None:
        return project.recipe or "auto"
    raise InvalidInput(
        "give a RECIPE (or auto), or --project DIR", hint="e.g. envforge lock cpu --project ."
    )


def load_project_option(project_dir: Path | None, extras: Sequence[str]) -> Project | None:
    """The project named by ``--project`` (None without one); ``--extra`` needs it."""
    if project_dir is None:
        if extras:
            raise InvalidInput("--extra is for --project", hint="add --project DIR")
        return None
    from envforge.project.read import load_project  # noqa: PLC0415 - tomllib when used

    return load_project(project_dir, extras=extras)


# --------------------------------------------------------------------------- settings


def effective_settings(
    flags: Mapping[str, Any], project: Project | None, keys: Sequence[str]
) -> Settings:
    """The settings ``keys`` (:mod:`envforge.core.settings`): ``flags`` (keyed by setting,
    None: not given; a value click took from an environment variable counts as the
    variable's), the environment, the project's ``[tool.envforge]``, the user's file.
    A value from a file is said on stderr, one line each."""
    from envforge.core.settings import KEYS, resolve  # noqa: PLC0415 - tomllib when used

    ctx = click.get_current_context(silent=True)
    given: dict[str, Any] = {}
    for key, value in flags.items():
        source = ctx.get_parameter_source(key) if ctx is not None else None
        if source == ParameterSource.ENVIRONMENT or value is False:
            continue
        given[key] = tuple(value) if isinstance(value, (list, tuple)) else value
    settings = resolve(
        given,
        project=dict(project.settings) if project is not None else None,
        project_file=project.settings_file if project is not None else None,
        keys=keys,
    )
    for value in settings.values:
        if value.source in ("project", "user file"):
            flag = KEYS[value.key].flag or value.key
            say(f"{flag} {_shown(value.value)} (from {value.origin})")
    return settings


def _shown(value: object) -> str:
    if isinstance(value, tuple):
        return " ".join(str(v) for v in value)
    return str(value)


def trusted_files(trust: Sequence[Path]) -> tuple[list[Path], str]:
    """The trust files (``--trust``, else ``ENVFORGE_TRUSTED_KEYS``, else the user's file
    ``trusted_keys``) and the setting to name in a refusal."""
    value = effective_settings({"trusted_keys": tuple(trust)}, None, ("trusted_keys",)).get(
        "trusted_keys"
    )
    files = list(value.value) if isinstance(value.value, tuple) else []
    setting = {"flag": "--trust", "environment": "ENVFORGE_TRUSTED_KEYS"}.get(
        value.source, f"{value.origin}: trusted_keys"
    )
    return files, setting


def trusted_keys(trust: Sequence[Path]) -> TrustList:
    """The trusted keys themselves (:func:`trusted_files`; empty without any), for what
    is verified with them (an attestation names no key of its own)."""
    files, setting = trusted_files(trust)
    keys: TrustList = _signing.load_trust(files, setting=setting) if files else _signing.TrustList()
    return keys
