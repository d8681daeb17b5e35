"""What a recipe value may hold: one set of checks for the loader and the renderer.

The loader (:mod:`envforge.recipe.load`) checks every text it reads with
:func:`text_problem` and ends with :func:`check_renderable` on the finished
:class:`Recipe`; the renderer (:mod:`envforge.render.context`) calls
:func:`check_renderable` again on the recipe it is given (a recipe made in code, not
loaded, gets the same refusals). So whatever ``validate`` accepts, ``render`` renders.
The loader adds checks of meaning the renderer does not need (pins, specifiers, the
stack tag, the step timeout); they are here too so that they are in one place.

Every refusal is a :class:`RecipeError` (exit 2, one line) naming the recipe's origin
and the key.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from envforge.core.patterns import ENV_NAME_RE, IMAGE_RE, NAME_RE, PYTHON_RE
from envforge.errors import RecipeError
from envforge.knowledge.companions import companion_names
from envforge.recipe.model import UNQUOTABLE, Recipe

#: Longest text value accepted. The classic builder refuses Dockerfile lines over 64 KiB;
#: 4096 characters (at most 4 bytes each, quoted) keep every line well below that.
MAX_VALUE_CHARS = 4096
#: Longest step timeout (seconds): a day. Longer ones overflow the OS's timers.
MAX_STEP_TIMEOUT = 86400.0
#: Longest image tag the engine accepts (the stack tag becomes one).
MAX_TAG_CHARS = 128
#: Longest torch version and ROCm/CUDA version: with them the stack tag stays a valid tag.
MAX_TORCH_VERSION_CHARS = 64
MAX_ACCELERATOR_VERSION_CHARS = 32

#: Environment variables a recipe may not set (docs/recipes.md): the names the built
#: environment itself depends on. envforge sets PATH, VIRTUAL_ENV (the venv first on
#: PATH), HOME and NPROC_PER_NODE (shell) itself; the others would make Python or the
#: dynamic loader use code from outside the certified environment, or replace the base
#: image's own value (the CUDA images set LD_LIBRARY_PATH): recipe values are literal
#: (``$LD_LIBRARY_PATH`` is not expanded), so there is no appending form.
RESERVED_ENV: Mapping[str, str] = {
    "PATH": "envforge puts the environment's bin first on it",
    "VIRTUAL_ENV": "envforge sets it to the environment",
    "PYTHONHOME": "it moves Python's standard library away from the environment's",
    "PYTHONPATH": "it puts code from outside the environment before the environment's",
    "PYTHONUSERBASE": "it adds a user site outside the environment",
    "PYTHONSTARTUP": "it runs code from outside the environment",
    "PYTHONEXECUTABLE": "it changes which interpreter the environment reports",
    "PYTHONPLATLIBDIR": "it moves where Python finds its own modules",
    "LD_LIBRARY_PATH": "it replaces the base image's library path (values are literal: "
    "no $LD_LIBRARY_PATH appending form)",
    "LD_PRELOAD": "it loads libraries from outside the environment into every process",
    "LD_AUDIT": "it loads libraries from outside the environment into every process",
    "BASH_ENV": "bash runs the file it names before every non-interactive script",
    "ENV": "sh and bash in POSIX mode run the file it names when they start",
    "HOME": "the shell sets it",
    "NPROC_PER_NODE": "the shell sets it from the GPU count",
}

_SURROGATE = re.compile("[\ud800-\udfff]")
#: A Docker image tag.
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*\Z", re.ASCII)


def is_control(ch: str) -> bool:
    """A control character other than TAB (which is kept exactly): C0, DEL, C1, and the
    Unicode line and paragraph separators."""
    return ch != "\t" and (unicodedata.category(ch) == "Cc" or ch in UNQUOTABLE)


def text_problem(value: str) -> tuple[str, str] | None:
    """Why ``value`` cannot be a recipe text (message, fix), or None when it can.

    Line breaks and NUL cannot be quoted at all; other control characters (ESC, BEL,
    DEL, C1) would not read back the same from a Dockerfile, a label or a terminal, and
    are refused rather than changed; lone surrogates are not UTF-8; over-long values do
    not fit a Dockerfile line.
    """
    for ch in value:
        if ch in UNQUOTABLE:
            return (
                f"contains {ch!r}, which cannot be quoted safely in a Dockerfile or shell script",
                "put the value on one line, without control characters",
            )
        if is_control(ch):
            return (
                f"contains the control character {ch!r} (U+{ord(ch):04X}), which would not "
                "read back the same",
                "remove it (control characters and terminal escapes are refused, not changed)",
            )
    if _SURROGATE.search(value):
        return (
            "contains a lone surrogate code point, which is not valid UTF-8",
            "write the value as valid Unicode text",
        )
    if len(value) > MAX_VALUE_CHARS:
        return (
            f"is {len(value)} characters long; at most {MAX_VALUE_CHARS} fit in a Dockerfile line",
            "shorten the value",
        )
    return None


def env_name_problem(name: str) -> tuple[str, str] | None:
    """Why ``name`` cannot be a recipe's environment variable (message, fix), or None."""
    if not ENV_NAME_RE.match(name):
        return (
            "is not a valid environment variable name (rule env-name: POSIX shell names)",
            "use letters, digits and '_', not starting with a digit",
        )
    if len(name) > MAX_VALUE_CHARS:
        return (f"the name is {len(name)} characters long", "shorten it")
    if name in RESERVED_ENV:
        return (
            f"is reserved: {RESERVED_ENV[name]}",
            f"remove env.{name}; the reserved names are listed in docs/recipes.md",
        )
    return None


# ``name==`` / ``name===`` / ``name[extra] ==``: an operator with no version after it.
_SHA256_RE = re.compile(r"[0-9a-f]{64}")
#: A wheel URL's address part: https to any host, http only to 127.0.0.1 (a local server);
#: no user info, query or spaces.
_URL_RE = re.compile(
    r"(?:https://[A-Za-z0-9.-]+(?::\d{1,5})?|http://127\.0\.0\.1(?::\d{1,5})?)/[^\s?#@]+"
)
_EMPTY_PIN_RE = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*===?\s*$")


def pin_problem(text: str) -> tuple[str, str] | None:
    """Why ``text`` is not a pinned PEP 508 requirement (``name==VERSION``), or None."""
    empty = _EMPTY_PIN_RE.fullmatch(text)
    if empty:  # decided here, not by the wording of packaging's parser (it changes)
        return (f"{text!r} has an empty pin", f"write it as {empty.group(1)}==VERSION")
    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        return (
            f"{text!r} is not a PEP 508 requirement: {' '.join(str(exc).split())}",
            "write it as name==VERSION",
        )
    if req.url:
        return url_problem(text, req)
    pins = [s for s in req.specifier if s.operator in ("==", "===")]
    companion = canonicalize_name(req.name) in companion_names()
    if not pins and companion and not str(req.specifier) and text.strip() == req.name:
        return None  # a bare companion name: the stack pins the release that pairs with torch
    if not pins and companion:
        return (
            f"{text!r} is not pinned",
            f"write it as {req.name} alone (envforge pins the "
            f"release that pairs with torch) or {req.name}==VERSION",
        )
    if not pins:
        return (f"{text!r} is not pinned", f"write it as {req.name}==VERSION")
    for spec in pins:
        if spec.operator == "===":
            if not spec.version.strip():
                return (f"{text!r} has an empty pin", f"write it as {req.name}==VERSION")
            continue
        if spec.version.endswith(".*"):
            return (f"{text!r} pins a prefix, not a version", f"write it as {req.name}==VERSION")
        try:
            version = Version(spec.version)
        except InvalidVersion:
            return (f"{text!r}: {spec.version!r} is not a version", "write it like name==1.2.3")
        if not req.specifier.contains(version, prereleases=True):
            return (f"{text!r} can never be satisfied", "keep one pin per package")
    return None


_INDEX_RE = re.compile(
    r"(?:https://[A-Za-z0-9.-]+(?::\d{1,5})?|http://127\.0\.0\.1(?::\d{1,5})?)(?:/[^\s?#@]*)?"
)


def url_problem(text: str, req: Requirement) -> tuple[str, str] | None:
    """A ``name @ URL`` entry must name one wheel (``.whl``) by an https URL (http only
    to 127.0.0.1) with its sha256 in the fragment, ``#sha256=<64 lowercase hex>``: the
    installers check the downloaded file against it (uv and pip alike), so another file
    at that URL fails the install. The torch family never comes from a URL (it comes from
    the stack's index or a wheelhouse only)."""
    url = req.url or ""
    name = canonicalize_name(req.name)
    wheel = f"{req.name} @ https://HOST/PATH/{req.name}-VERSION-TAGS.whl#sha256=<64 hex digits>"
    if name == "torch" or name in companion_names():
        return (
            f"{text!r}: {req.name} is part of the torch family, which comes only from "
            "the stack's index or a --wheelhouse, never from a URL",
            f"write it as {req.name} (or {req.name}==VERSION) and pass --wheelhouse DIR "
            "for a wheel of your own",
        )
    if req.extras or req.marker is not None:
        return (
            f"{text!r}: extras and markers are not taken on a URL entry",
            f"write it as {wheel}",
        )
    address, hashed, digest = url.partition("#sha256=")
    if not hashed or not _SHA256_RE.fullmatch(digest):
        return (
            f"{text!r} is not pinned (a URL without #sha256=<the file's 64 lowercase hex digits>)",
            f"write it as {wheel} (sha256sum FILE prints them)",
        )
    if not _URL_RE.fullmatch(address):
        return (
            f"{text!r}: only https:// URLs (http:// to 127.0.0.1) are installed",
            f"write it as {wheel}",
        )
    filename = address.rsplit("/", 1)[-1]
    try:
        wheel_name = parse_wheel_filename(filename)[0]
    except InvalidWheelFilename:
        return (
            f"{text!r}: {filename!r} is not a wheel file name (a URL entry names one .whl file)",
            f"write it as {wheel}",
        )
    if wheel_name != name:
        return (
            f"{text!r}: the wheel {filename!r} is {wheel_name}, not {req.name}",
            f"write it as {wheel_name} @ {url}",
        )
    return None


def index_entry_problem(text: str) -> tuple[str, str] | None:
    """A package from its own index: a ``name==VERSION`` pin (pin_problem has passed),
    not a URL and not a member of the torch family (which comes from the stack's index)."""
    req = Requirement(text)
    name = canonicalize_name(req.name)
    if req.url:
        return (
            f"{text!r} is a URL: a package from an index is written name==VERSION",
            "drop index: for a wheel URL, or write the entry as name==VERSION",
        )
    if name == "torch" or name in companion_names():
        return (
            f"{text!r}: {req.name} is part of the torch family, which comes only from "
            "the stack's index (torch.index) or a --wheelhouse",
            f"write it as a plain entry ({req.name}) without index:",
        )
    return None


def index_url_problem(url: str) -> tuple[str, str] | None:
    """A per-package index: a PEP 503 simple index over https (http only to 127.0.0.1)."""
    if not _INDEX_RE.fullmatch(url):
        return (
            f"{url!r} is not an https:// index URL (http:// only to 127.0.0.1; no "
            "user, query or fragment)",
            "write it like https://HOST/PATH/simple",
        )
    return None


def numpy_problem(text: str) -> tuple[str, str] | None:
    """Why ``text`` is not a NumPy bound (a PEP 440 specifier set), or None."""
    try:
        SpecifierSet(text)
        Requirement("numpy" + text.strip())
    except (InvalidSpecifier, InvalidRequirement):
        return (f"{text!r} is not a PEP 440 specifier", 'e.g. numpy: "<2"')
    return None


def torch_version_problem(text: str) -> tuple[str, str] | None:
    """Why ``text`` is not a torch version as written in a pin (``2.4.1``, ``1.13.1+rocm5.2``)."""
    try:
        version = Version(text)
    except InvalidVersion:
        return (f"{text!r} is not a version", 'write it like "2.4.1" or "1.13.1+rocm5.2"')
    if version.epoch:
        return (f"{text!r} has an epoch ('!'), which no torch release has", "remove the epoch")
    if str(version) != text:
        return (f"{text!r} is not written the standard way", f'write it as "{version}"')
    return None


def step_timeout_problem(value: float) -> tuple[str, str] | None:
    """Why ``value`` is not a step timeout in seconds, or None."""
    if not math.isfinite(value):
        return (f"{value} is not a finite number", "write a number like 30")
    if value <= 0:
        return ("must be greater than zero", "write a number like 30")
    if value > MAX_STEP_TIMEOUT:
        return (
            f"{value:g} s is more than a day ({MAX_STEP_TIMEOUT:g} s)",
            "write a number of seconds like 600",
        )
    return None


# --------------------------------------------------------------------------- whole recipes


class _Check:
    def __init__(self, recipe: Recipe) -> None:
        self.source = recipe.origin

    def fail(self, key: str, problem: tuple[str, str]) -> RecipeError:
        return RecipeError(self.source, key, problem[0], hint=problem[1])

    def text(self, key: str, value: str) -> None:
        problem = text_problem(value)
        if problem is not None:
            raise self.fail(key, problem)

    def pattern(self, key: str, value: str, pattern: re.Pattern[str], example: str) -> None:
        self.text(key, value)
        if not pattern.match(value):
            raise self.fail(key, (f"{value!r} is not valid here", f"write it like {example}"))


def check_renderable(recipe: Recipe) -> None:
    """Refuse a recipe that cannot be rendered: every value the renderers use must be
    text :func:`text_problem` accepts, the unquoted ones (name, Python version, base
    image) must match their patterns, and env names must be valid and not reserved."""
    c = _Check(recipe)
    c.pattern(
        "name",
        recipe.name,
        NAME_RE,
        "gfx1030 (lowercase letters and digits, separated by single '.', '_' or '-')",
    )
    c.text("description", recipe.description)
    c.pattern("python", recipe.python, PYTHON_RE, '"3.10"')
    c.text("torch.version", recipe.torch.version)
    if recipe.torch.index is not None:
        c.text("torch.index", recipe.torch.index)
    c.text("numpy", recipe.numpy)
    for key, value in (("rocm", recipe.rocm), ("cuda", recipe.cuda), ("gpu.arch", recipe.gpu.arch)):
        if value is not None:
            c.text(key, value)
    for i, product in enumerate(recipe.gpu.products):
        c.text(f"gpu.products[{i}]", product)
    for i, pkg in enumerate(recipe.packages):
        c.text(f"packages[{i}]", pkg)
    for entry in recipe.package_indexes:
        problem = text_problem(entry.url) or index_url_problem(entry.url)
        if problem is not None:
            raise c.fail(f"packages: {entry.name}.index", problem)
    for e in recipe.env:
        problem = text_problem(e.name) or env_name_problem(e.name)
        if problem is not None:
            raise c.fail(f"env.{e.name}", problem)
        c.text(f"env.{e.name}.value", e.value)
    c.pattern("base_image", recipe.base_image, IMAGE_RE, "ubuntu:22.04")


def check_meaning(recipe: Recipe) -> None:
    """The loader's checks beyond :func:`check_renderable`: what the values mean.

    The torch version, the NumPy bound and each package must make valid requirement
    lines (the venv plan writes them to requirements.txt), packages must be pinned, the
    products must fit the one label that lists them, the stack tag must be an image tag
    and the step timeout a number of seconds up to a day.
    """
    c = _Check(recipe)
    problem = torch_version_problem(recipe.torch.version)
    if problem is not None:
        raise c.fail("torch.version", problem)
    for key, value, most in (
        ("torch.version", recipe.torch.version, MAX_TORCH_VERSION_CHARS),
        ("rocm", recipe.rocm, MAX_ACCELERATOR_VERSION_CHARS),
        ("cuda", recipe.cuda, MAX_ACCELERATOR_VERSION_CHARS),
    ):
        if value is not None and len(value) > most:
            raise c.fail(
                key,
                (
                    f"is {len(value)} characters long; at most {most} (it is part "
                    "of the image tag)",
                    "write the version itself",
                ),
            )
    problem = numpy_problem(recipe.numpy)
    if problem is not None:
        raise c.fail("numpy", problem)
    for i, pkg in enumerate(recipe.packages):
        problem = pin_problem(pkg)
        if problem is not None:
            raise c.fail(f"packages[{i}]", problem)
    joined = ", ".join(recipe.gpu.products)
    if len(joined) > MAX_VALUE_CHARS:
        raise c.fail(
            "gpu.products",
            (
                f"together {len(joined)} characters; at most {MAX_VALUE_CHARS} fit in the image's "
                "gpu-products label",
                "list fewer or shorter product names",
            ),
        )
    tag = recipe.stack_tag
    if len(tag) > MAX_TAG_CHARS or not _TAG_RE.match(tag):
        raise c.fail(
            "torch.version",
            (
                f"the stack tag {tag!r} is not a valid image tag (at most {MAX_TAG_CHARS} "
                "characters: letters, digits, '_', '.', '-')",
                "write torch.version like 2.5.1",
            ),
        )
    problem = step_timeout_problem(recipe.certify.step_timeout)
    if problem is not None:
        raise c.fail("certify.step_timeout", problem)
