"""Lock files: a recipe's full requirement set, resolved with hashes.

``envforge lock RECIPE`` runs ``uv pip compile --generate-hashes`` for the recipe's
platform (``x86_64-manylinux_2_28``) and Python, with the recipe's indexes (or a
``--wheelhouse``), and writes ``<name>.lock.txt`` next to the recipe file.

The first line of a lock records a digest of what it was resolved from (the requirement
lines, constraint lines, torch index, Python and platform)::

    # envforge-lock: recipe=cpu inputs=sha256:… python=3.11 platform=x86_64-manylinux_2_28

Both backends install from :func:`lock_path` when it returns a path, with hashes required
(``uv pip sync --require-hashes`` in a venv; in images :func:`split_lock` splits it into
torch's layer and the rest, each installed with ``--require-hashes --no-deps``).
A lock whose inputs no longer match the recipe (a ``--set`` override, an edited recipe) is
*stale*: :func:`lock_path` ignores it and :func:`stale_lock` says so.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from envforge.core import proc
from envforge.core.archives import archive_problem
from envforge.core.fsutil import check_file_target, read_limited, read_reason, write_atomically
from envforge.core.mirror import Mirrors, mirrors_from_env, rewrite
from envforge.core.paths import state_dir
from envforge.core.resources import recipes_dir
from envforge.core.uvtext import looks_like_network, storage_errno
from envforge.errors import BuildFailed, InvalidInput, Unavailable
from envforge.recipe.model import Recipe
from envforge.stack import Stack, stack_of

PLATFORM = "x86_64-manylinux_2_28"
#: The image platform a lock's wheels (and hashes) are for, in docker's names.
LOCK_PLATFORM = "linux/amd64"
LOCK_SUFFIX = ".lock.txt"

#: Seconds ``uv pip compile`` may take (it downloads metadata, sometimes whole wheels).
COMPILE_TIMEOUT = 900.0

#: A lock file is refused above this size (uv's locks are a few hundred KiB at most).
MAX_LOCK_BYTES = 16 * 1024 * 1024
_PINNED_RE = re.compile(
    r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?(?:\[[A-Za-z0-9._,-]*\])?==[A-Za-z0-9.+!_-]+"
)
_HASH_RE = re.compile(r"--hash=sha(?:256:[0-9a-f]{64}|384:[0-9a-f]{96}|512:[0-9a-f]{128})")
_HEADER_RE = re.compile(r"^# envforge-lock: .*\binputs=(sha256:[0-9a-f]{64})\b")


@dataclass(frozen=True)
class LockedInstall:
    """A lock split for an image's two install layers (:func:`split_lock`); each entry is
    one requirement-file line, ``name==version [; marker] --hash=...``."""

    #: torch and every locked package torch needs (transitively): the first layer.
    torch: tuple[str, ...]
    #: Everything else (NumPy, the recipe's packages and what only they need).
    rest: tuple[str, ...]
    #: The lock file's name, for the Dockerfile's header.
    name: str


@dataclass(frozen=True)
class LockResult:
    path: Path
    count: int


def serves_platform(platform: str | None) -> bool:
    """Whether a lock (resolved for :data:`PLATFORM`) can install an image for
    ``platform`` (None: the engine's own, assumed linux/amd64 as before ``--platform``):
    its hashes name x86_64 wheels, which an arm64 image cannot install."""
    return platform is None or platform == LOCK_PLATFORM


def inputs_digest(
    recipe: Recipe, stack: Stack | None = None, constraints: Sequence[str] = ()
) -> str:
    """What a lock is resolved from; a lock with another digest is stale. ``stack``: the
    recipe's stack as the caller computed it (None: from the recipe), with a project's
    requirements when it has one; ``constraints``: a project's ``-c`` lines."""
    stack = stack_of(recipe) if stack is None else stack
    data: dict[str, object] = {
        "requirements": list(stack.requirement_lines()),
        "torch_index": stack.index,
        "python": recipe.python,
        "platform": PLATFORM,
    }
    if constraints:  # absent for recipes, so their digests stay as they were
        data["constraints"] = list(constraints)
    blob = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(blob).hexdigest()


def recipe_file(recipe: Recipe) -> Path | None:
    """The file a recipe was loaded from (its ``origin`` without ``--set`` notes)."""
    origin = recipe.origin.split(" (with --set ", 1)[0]
    if origin.startswith("<"):
        return None
    path = Path(origin)
    return path if path.is_file() else None


def default_lock_file(recipe: Recipe) -> Path | None:
    """``<recipe dir>/<name>.lock.txt``, whether or not it exists; for a shipped recipe
    ``$ENVFORGE_HOME/locks/<name>.lock.txt`` (never inside the installed package)."""
    source = recipe_file(recipe)
    if source is None:
        return None
    if _is_shipped(source):
        return state_dir() / "locks" / (recipe.name + LOCK_SUFFIX)
    return source.with_name(recipe.name + LOCK_SUFFIX)


def _is_shipped(source: Path) -> bool:
    try:
        return source.resolve().parent == recipes_dir().resolve()
    except OSError:
        return False


def read_lock(path: Path) -> bytes:
    """A lock file's bytes: a regular file of at most :data:`MAX_LOCK_BYTES`
    (:func:`~envforge.core.fsutil.read_limited`: a FIFO never blocks, ``/dev/zero`` is not
    read); its ``OSError`` otherwise (:func:`~envforge.core.fsutil.read_reason` words it)."""
    return read_limited(path, MAX_LOCK_BYTES)


def lock_digest(path: Path) -> str | None:
    """The inputs digest in a lock file's first line; None without one."""
    try:
        first = read_lock(path).split(b"\n", 1)[0].decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    match = _HEADER_RE.match(first)
    return match.group(1) if match else None


def lock_path(recipe: Recipe, stack: Stack | None = None) -> Path | None:
    """The recipe's lock file when one exists and matches the recipe; else None.

    This is how both backends find the lock: install from it with hashes required. A
    matching lock that holds anything but pinned requirements and their hashes is refused
    (:func:`check_lock`).
    """
    path = default_lock_file(recipe)
    if path is None or not path.is_file():
        return None
    stack = stack_of(recipe) if stack is None else stack
    if stack.indexed_lines() or lock_digest(path) != inputs_digest(recipe, stack):
        return None  # (a stack with a package from its own index has no lock: write_lock)
    check_lock(path, recipe.name, direct_references(stack))
    return path


def direct_references(stack: Stack) -> frozenset[tuple[str, str]]:
    """(canonical name, URL) of each ``name @ URL#sha256=...`` line the stack asks for:
    the only direct references a lock of that stack may hold."""
    found: set[tuple[str, str]] = set()
    for line in stack.requirement_lines():
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.url:
            found.add((canonicalize_name(req.name), req.url))
    return frozenset(found)


def check_lock(
    path: Path, recipe_name: str = "RECIPE", urls: frozenset[tuple[str, str]] = frozenset()
) -> None:
    """Refuse a lock file with anything but ``name==version`` lines (with an optional
    environment marker), ``--hash=sha256:…`` options and comments.

    An option such as ``--extra-index-url``, ``-i``, ``-f``, ``-r`` or ``-e``, or a direct
    reference (a URL, a path, ``name @ url``), would let the lock file send installs to
    another index or source than the recipe names. The one exception is a wheel URL the
    recipe itself names with its sha256 (``urls``: :func:`direct_references`), written
    exactly as the recipe writes it. Raises :class:`InvalidInput` naming the file and line.
    """
    hint = f"regenerate it with `envforge lock {recipe_name}`, or delete it"
    try:
        data = read_lock(path)
    except OSError as exc:
        raise InvalidInput(
            f"{path}: cannot read the lock: {read_reason(exc, path)}", hint=hint
        ) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{path}: not UTF-8 text ({exc.reason})", hint=hint) from None
    continued = False
    for number, raw in enumerate(text.splitlines(), 1):
        problem = _lock_line_problem(raw, continued, urls)
        if problem is not None:
            raise InvalidInput(f"{path}:{number}: {problem}", hint=hint)
        body = raw.split(" #", 1)[0].rstrip()
        continued = body.endswith("\\") and not raw.lstrip().startswith("#")


def _lock_line_problem(
    raw: str, continued: bool, urls: frozenset[tuple[str, str]] = frozenset()
) -> str | None:
    """What is wrong with one physical line of a lock file (None: nothing).

    ``continued``: the line before ended with a backslash (this one continues it);
    ``urls``: the direct references the recipe names (see :func:`check_lock`).
    """
    line = raw.strip()
    if not line or line.startswith("#"):
        return None
    if any(ord(c) < 32 and c != "\t" for c in line):
        return "a control character in the line"
    line = re.split(r"\s#", line, maxsplit=1)[0].rstrip()  # an inline comment
    if line.endswith("\\"):
        line = line[:-1].rstrip()
    tokens = line.split()
    first_option = next((i for i, t in enumerate(tokens) if t.startswith("-")), len(tokens))
    if first_option:
        if continued:
            return f"unexpected {tokens[0]!r} on a continuation line"
        requirement = " ".join(tokens[:first_option]).partition(";")[0].strip()
        direct = _direct(requirement)
        if not _PINNED_RE.fullmatch(requirement) and (
            direct not in urls or archive_problem(direct[1]) is not None
        ):
            return (
                f"{requirement!r} is not a pinned requirement (name==version): URLs, paths"
                " and direct references are not allowed in a lock file"
            )
    for token in tokens[first_option:]:
        if _HASH_RE.fullmatch(token):
            continue
        if token.startswith("-"):
            return (
                f"option {token.split('=', 1)[0]} is not allowed in a lock file"
                " (only --hash=sha256:...): it could send installs to another index or source"
            )
        return f"unexpected {token!r} after the hashes"
    return None


def _direct(requirement: str) -> tuple[str, str] | None:
    """(canonical name, URL) of a ``name @ URL`` line; None for anything else."""
    try:
        req = Requirement(requirement)
    except InvalidRequirement:
        return None
    return (canonicalize_name(req.name), req.url) if req.url else None


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def split_lock(path: Path, roots: Sequence[str] = ("torch",)) -> LockedInstall:
    """Split a (checked) lock into the torch family's closure and the rest, one line per
    package.

    A package belongs to torch's layer when it is one of ``roots`` (torch and the stack's
    companions, :meth:`envforge.stack.Stack.family`) or the lock's ``# via`` notes (uv's
    annotations) say that a package already in torch's layer needs it; everything else
    (NumPy, the recipe's packages and what only they need) is the rest. A lock without
    notes puts only torch in the first layer, which is still exact, just less reusable.
    """
    entries: dict[str, list[str]] = {}
    parents: dict[str, set[str]] = {}
    current: str | None = None
    in_via = False
    try:
        text = read_lock(path).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = read_reason(exc, path) if isinstance(exc, OSError) else "not UTF-8 text"
        raise InvalidInput(
            f"{path}: cannot read the lock: {why}", hint="regenerate it with `envforge lock RECIPE`"
        ) from None
    for raw in text.splitlines():
        if not raw.strip():
            continue
        if not raw[0].isspace():
            if raw.startswith("#"):
                continue
            requirement = raw.split(" #", 1)[0].rstrip().rstrip("\\").strip()
            current = _canonical(re.split(r"[\[=;<>!~ ]", requirement, maxsplit=1)[0])
            entries[current] = [requirement]
            parents[current] = set()
            in_via = False
            continue
        if current is None:
            continue
        line = raw.strip()
        if line.startswith("--hash="):
            entries[current].append(line.rstrip("\\").strip())
        elif line.startswith("# via"):
            rest = line[len("# via") :].strip()
            in_via = not rest
            if rest and not rest.startswith("-"):
                parents[current].add(_canonical(rest.split()[0]))
        elif in_via and line.startswith("#"):
            name = line.lstrip("#").strip()
            if name and not name.startswith("-"):
                parents[current].add(_canonical(name.split()[0]))
    closure = {_canonical(root) for root in roots} & set(entries)
    grew = True
    while grew:
        grew = False
        for name, via in parents.items():
            if name not in closure and via & closure:
                closure.add(name)
                grew = True
    return LockedInstall(
        torch=tuple(" ".join(entries[n]) for n in entries if n in closure),
        rest=tuple(" ".join(entries[n]) for n in entries if n not in closure),
        name=path.name,
    )


def stale_lock(recipe: Recipe, stack: Stack | None = None) -> Path | None:
    """A lock file next to the recipe that no longer matches it (ignored), or None."""
    path = default_lock_file(recipe)
    if path is None or not path.is_file():
        return None
    return None if lock_digest(path) == inputs_digest(recipe, stack) else path


def uv_bin() -> str:
    """The ``uv`` binary of the installed ``uv`` package (a declared dependency)."""
    try:
        from uv import find_uv_bin  # noqa: PLC0415 - a missing uv is an error message

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        raise Unavailable(
            "the uv binary is missing", hint="pip install uv (envforge declares it as a dependency)"
        ) from None


def uv_env(
    ca_bundle: Path | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Environment for uv: never download interpreters; trust ``ca_bundle`` when given."""
    env = dict(os.environ if environ is None else environ)
    env["UV_PYTHON_DOWNLOADS"] = "never"
    env["UV_NO_PROGRESS"] = "1"
    env.pop("VIRTUAL_ENV", None)
    env.pop("UV_SYSTEM_PYTHON", None)
    if ca_bundle is not None:
        env["SSL_CERT_FILE"] = str(ca_bundle.resolve())
        env["PIP_CERT"] = str(ca_bundle.resolve())
    return env


def source_args(
    recipe: Recipe,
    wheelhouse: Path | None,
    stack: Stack | None = None,
    mirrors: Mirrors | None = None,
) -> list[str]:
    """uv options naming where packages come from.

    With a wheelhouse, torch comes from there (``--find-links``) instead of the torch
    index; everything else from the default index. Without one, the torch index is an
    extra index, which uv searches before the default one.
    """
    if wheelhouse is not None:
        return ["--find-links", str(wheelhouse.resolve())]
    index = (stack_of(recipe) if stack is None else stack).index
    if index:
        return [
            "--extra-index-url",
            rewrite(index, mirrors_from_env() if mirrors is None else mirrors),
        ]
    return []


def check_inputs(wheelhouse: Path | None, ca_bundle: Path | None) -> None:
    if wheelhouse is not None:
        if not wheelhouse.is_dir():
            raise InvalidInput(
                f"--wheelhouse {wheelhouse}: not a directory", hint="name a folder of .whl files"
            )
        if not any(p.suffix == ".whl" for p in wheelhouse.iterdir()):
            raise InvalidInput(
                f"--wheelhouse {wheelhouse}: no .whl files in it",
                hint="name a folder of .whl files",
            )
    if ca_bundle is not None and not ca_bundle.is_file():
        raise InvalidInput(
            f"--ca-bundle {ca_bundle}: not a file", hint="name a PEM file of CA certificates"
        )


def check_wheelhouse(stack: Stack, wheelhouse: Path | None) -> None:
    """With a wheelhouse the stack's index is not used, and the torch family never comes
    from the default index: every companion must have its wheel in the wheelhouse.
    :class:`Unavailable` (exit 4) names the wheel that is needed. (A stack whose torch
    comes from the default index has no other index: nothing to check.)"""
    if wheelhouse is None or stack.index is None:
        return
    have: list[tuple[str, Version]] = []
    for path in wheelhouse.glob("*.whl"):
        try:
            name, version, _build, _tags = parse_wheel_filename(path.name)
        except InvalidWheelFilename:
            continue
        have.append((name, version))
    for pin in stack.companions:
        req = Requirement(pin.requirement)
        wanted = canonicalize_name(req.name)
        if not any(n == wanted and req.specifier.contains(v, prereleases=True) for n, v in have):
            raise Unavailable(
                f"--wheelhouse {wheelhouse}: no wheel for {pin.requirement}, which pairs with "
                f"{stack.torch} (the torch family comes from the wheelhouse or {stack.index}, "
                "never from the default index)",
                hint=f"put the {pin.requirement} wheel into {wheelhouse}, e.g. `pip download "
                f"--no-deps --index-url {stack.index} '{pin.requirement}' -d {wheelhouse}`",
            )


def family_wheels(stack: Stack) -> str:
    """What a wheelhouse needs when the stack's index cannot be reached: the torch family's
    exact wheels and the command that downloads them ('' for a default-index stack)."""
    if stack.index is None:
        return ""
    family = (stack.torch, *(c.requirement for c in stack.companions))
    quoted = " ".join(f"'{line}'" for line in family)
    return (
        f"the torch family ({', '.join(family)}) comes only from {stack.index} or a "
        f"--wheelhouse: `pip download --no-deps --index-url {stack.index} {quoted} "
        "-d DIR`, then --wheelhouse DIR"
    )


def uv_failure(
    what: str,
    done: proc.Completed,
    recipe: Recipe,
    *,
    hint: str,
    stack: Stack | None = None,
) -> BuildFailed | Unavailable:
    """The right error for a failed uv run: network → Unavailable (4), else BuildFailed (3).
    ``stack``: a network failure names the torch family's wheels and how to provide them."""
    lines = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()]
    # From uv's first "error:" line on (its causes follow it), else the last lines.
    first = next((i for i, ln in enumerate(lines) if ln.lower().startswith("error")), None)
    kept = lines[first:] if first is not None else lines[-4:]
    tail = " | ".join(kept)
    if len(tail) > 600:
        tail = tail[:597] + "..."
    if done.timed_out:
        return Unavailable(f"{what} for {recipe.name} did not finish in time", hint=hint)
    storage = storage_errno(done.stderr)
    if storage is not None:
        return Unavailable(
            f"{what} for {recipe.name}: {os.strerror(storage).lower()}: {tail}",
            hint="free space in (or make writable) the folder the message names: "
            "ENVFORGE_HOME, TMPDIR or uv's cache (UV_CACHE_DIR)",
        )
    if looks_like_network(done.stderr):
        where = recipe.torch.index or "the default index"
        wheels = family_wheels(stack) if stack is not None else ""
        return Unavailable(
            f"{what} for {recipe.name}: a package index cannot be reached ({where})"
            + (f"; {wheels}" if wheels else "")
            + f": {tail}",
            hint="check the network or proxy, pass --ca-bundle for a TLS-intercepting proxy, "
            "or --wheelhouse DIR with the wheels",
        )
    return BuildFailed(f"{what} for {recipe.name} failed: {tail}", hint=hint)


def write_lock(
    recipe: Recipe,
    *,
    wheelhouse: Path | None = None,
    ca_bundle: Path | None = None,
    output: Path | None = None,
    environ: Mapping[str, str] | None = None,
    stack: Stack | None = None,
    constraints: Sequence[str] = (),
    command: str | None = None,
) -> LockResult:
    """Resolve ``recipe`` (its ``stack``; None: computed from the recipe) into a hashed lock
    file; written atomically. ``constraints`` (a project's ``-c`` lines) bound the
    resolution without being installed; ``command`` is how to write the lock again."""
    check_inputs(wheelhouse, ca_bundle)
    stack = stack_of(recipe) if stack is None else stack
    if stack.indexed_lines():
        line, url = stack.indexed_lines()[0]
        name = Requirement(line).name
        raise InvalidInput(
            f"{recipe.origin}: packages: {name} comes from its own index "
            f"({url}), which a lock file cannot carry (it names no index per package)",
            hint=f"name the wheel by its URL instead ({name} @ https://.../FILE.whl"
            "#sha256=<64 hex>), which the lock carries with its hash, or choose a torch "
            f"whose own index has {name}",
        )
    check_wheelhouse(stack, wheelhouse)
    command = command or f"envforge lock {recipe.name}"
    target = output or default_lock_file(recipe)
    if target is None:
        raise InvalidInput(
            f"recipe {recipe.name} has no file to put the lock next to", hint="pass -o FILE"
        )
    check_file_target(target, setting="-o" if output is not None else None)
    body = _compile(
        recipe,
        stack,
        constraints,
        wheelhouse=wheelhouse,
        ca_bundle=ca_bundle,
        environ=environ,
        command=command,
    )
    header = (
        f"# envforge-lock: recipe={recipe.name}"
        f" inputs={inputs_digest(recipe, stack, constraints)}"
        f" python={recipe.python} platform={PLATFORM}\n"
        f"# Written by `{command}`; installs use it with hashes required.\n"
    ) + (stack.variant.lock_line() if stack.variant is not None else "")
    count = sum(
        1
        for line in body.splitlines()
        if line and not line[0].isspace() and not line.startswith("#")
    )
    write_atomically(target, header + body)
    return LockResult(path=target, count=count)


def _compile(
    recipe: Recipe,
    stack: Stack,
    constraints: Sequence[str],
    *,
    wheelhouse: Path | None,
    ca_bundle: Path | None,
    environ: Mapping[str, str] | None,
    command: str,
) -> str:
    """``uv pip compile --generate-hashes`` of the stack's requirement lines."""
    with tempfile.TemporaryDirectory(prefix="envforge-lock-") as tmp:
        req = Path(tmp) / "requirements.in"
        req.write_text("\n".join(stack.requirement_lines()) + "\n", encoding="utf-8")
        extra: list[str] = []
        if constraints:
            (Path(tmp) / "constraints.txt").write_text("\n".join(constraints) + "\n", "utf-8")
            extra = ["--constraint", "constraints.txt"]
        out = Path(tmp) / "lock.txt"
        argv = [
            uv_bin(),
            "pip",
            "compile",
            req.name,  # relative, so the lock's "via -r" notes name no temporary folder
            *extra,
            "--generate-hashes",
            "--python-version",
            recipe.python,
            "--python-platform",
            PLATFORM,
            "--no-header",
            "--quiet",
            "--output-file",
            str(out),
            *source_args(recipe, wheelhouse, stack),
        ]
        # a TMPDIR of its own, removed with ``tmp``: uv leaves ``uv-setuptools-*.lock``
        # files where it builds an sdist's metadata with setuptools
        private = Path(tmp) / "tmp"
        private.mkdir()
        env = {
            **uv_env(ca_bundle, environ),
            "TMPDIR": str(private),
            "TMP": str(private),
            "TEMP": str(private),
        }
        done = proc.run(argv, timeout=COMPILE_TIMEOUT, env=env, cwd=tmp)
        if not done.ok:
            raise uv_failure(
                "resolving the lock",
                done,
                recipe,
                hint=f"{command} --wheelhouse DIR",
                stack=stack,
            )
        return out.read_text(encoding="utf-8")
