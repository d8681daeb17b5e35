"""Read a recipe file (plus ``--set`` overrides) into a validated :class:`Recipe`.

Validation happens once, here. Every problem is a :class:`RecipeError` naming the file,
the key path (``env.HSA_OVERRIDE_GFX_VERSION.confidence``) and, for unknown keys, the
nearest valid one.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet

from envforge.errors import RecipeError
from envforge.recipe import yamlsrc
from envforge.recipe.model import (
    CONFIDENCES,
    LEVELS,
    UNQUOTABLE,
    VENDORS,
    CertifySettings,
    EnvVar,
    Gpu,
    KnownIssue,
    Recipe,
    Torch,
)

#: The recipe schema: key → nested schema (a dict) or None for a leaf.
SCHEMA: dict[str, Any] = {
    "name": None,
    "description": None,
    "gpu": {"vendor": None, "arch": None, "products": None},
    "base_image": None,
    "python": None,
    "rocm": None,
    "cuda": None,
    "torch": {"version": None, "index": None},
    "numpy": None,
    "packages": None,
    "env": None,  # name → ENV_ENTRY
    "known_issues": None,  # list of ISSUE
    "certify": {"step_timeout": None, "level": None, "extra_checks": None},
    "sources": None,
}
REQUIRED = ("name", "description", "gpu", "base_image", "python", "torch", "numpy")
ENV_ENTRY = ("value", "why", "evidence", "confidence")
ISSUE = ("symptom", "workaround", "evidence")

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
SHELL_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
VERSION_RE = re.compile(r"^\d+(\.\d+)*$")
PYTHON_RE = re.compile(r"^3\.\d{1,2}$")

T = TypeVar("T")


def _all_paths(schema: Mapping[str, Any], prefix: str = "") -> list[str]:
    out: list[str] = []
    for key, sub in schema.items():
        out.append(prefix + key)
        if isinstance(sub, dict):
            out.extend(_all_paths(sub, prefix + key + "."))
    return out


ALL_KEY_PATHS = tuple(_all_paths(SCHEMA))


def _misplaced(key: str, parent: str, *, exact: bool = False) -> str | None:
    """A key that belongs elsewhere in the schema (``index`` at top level → ``torch.index``)."""
    elsewhere = {p.rsplit(".", 1)[-1]: p for p in ALL_KEY_PATHS if p.rpartition(".")[0] != parent}
    if exact:
        return elsewhere.get(key)
    near = did_you_mean(key, elsewhere)
    return None if near is None else elsewhere[near]


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.5)
    return found[0] if found else None


class _Reader:
    """Typed access to parsed YAML that raises RecipeError with file and key path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, message: str, hint: str | None = None) -> RecipeError:
        return RecipeError(self.source, path, message, hint=hint)

    def mapping(
        self, value: object, path: str, allowed: Sequence[str], required: Sequence[str] = ()
    ) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path or "(top level)", f"expected a mapping, got {_kind(value)}")
        for key in value:
            if not isinstance(key, str):
                raise self.fail(path, f"key {key!r} is not a string", "quote the key")
            if key not in allowed:
                here = f"{path}.{key}" if path else key
                near = (
                    _misplaced(key, path, exact=True)
                    or did_you_mean(key, allowed)
                    or _misplaced(key, path)
                )
                hint = f"did you mean {near!r}?" if near else f"valid keys: {', '.join(allowed)}"
                raise self.fail(here, "unknown key", hint)
        for key in required:
            if key not in value or value[key] is None:
                here = f"{path}.{key}" if path else key
                raise self.fail(here, "missing required key", f"add {key}: to the recipe")
        return value

    def string(self, value: object, path: str, *, allow_empty: bool = False) -> str:
        text = yamlsrc.source_text(value)
        if text is not None:
            # Unquoted numbers: take the text as written, so 3.10 stays "3.10".
            value = text
        if isinstance(value, bool) or not isinstance(value, str):
            raise self.fail(path, f"expected a string, got {_kind(value)}", "quote the value")
        for bad in sorted(UNQUOTABLE):
            if bad in value:
                raise self.fail(
                    path,
                    f"contains {bad!r}, which cannot be quoted safely in a Dockerfile",
                    "put the value on one line",
                )
        if not allow_empty and not value.strip():
            raise self.fail(path, "must not be empty")
        return value

    def opt_string(self, value: object, path: str) -> str | None:
        return None if value is None else self.string(value, path)

    def strings(self, value: object, path: str) -> tuple[str, ...]:
        if value is None:
            return ()
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            raise self.fail(path, f"expected a list of strings, got {_kind(value)}")
        return tuple(self.string(v, f"{path}[{i}]") for i, v in enumerate(value))

    def version(self, value: object, path: str, pattern: re.Pattern[str] = VERSION_RE) -> str:
        text = self.string(value, path)
        if not pattern.match(text):
            raise self.fail(path, f"{text!r} is not a version like {_example(pattern)}")
        return text

    def choice(self, value: object, path: str, choices: Sequence[T]) -> T:
        text = self.string(value, path)
        for choice in choices:
            if text == choice:
                return choice
        near = did_you_mean(text, [str(c) for c in choices])
        hint = f"did you mean {near!r}?" if near else f"one of: {', '.join(map(str, choices))}"
        raise self.fail(path, f"{text!r} is not allowed", hint)

    def number(self, value: object, path: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(path, f"expected a number of seconds, got {_kind(value)}")
        if value <= 0:
            raise self.fail(path, "must be greater than zero")
        return float(value)


def _kind(value: object) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {value!r}"
    return {"dict": "a mapping", "list": "a list"}.get(type(value).__name__, type(value).__name__)


def _example(pattern: re.Pattern[str]) -> str:
    return '"3.10"' if pattern is PYTHON_RE else '"5.2" or "1.13.1"'


# --------------------------------------------------------------------------- overrides


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Apply ``key.path=value`` overrides (value parsed as YAML) to raw recipe data.

    ``env.NAME=value`` on a scalar sets that variable's value; a new variable made this
    way is marked ``confidence: uncertain`` with "set on the command line" as its why.
    ``env.NAME=null`` removes the variable.
    """
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not part for part in key.split(".")):
            raise RecipeError(
                "--set", item, "expected KEY.PATH=VALUE", hint="e.g. --set torch.version=2.2.2"
            )
        try:
            value = yamlsrc.load(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            # ">=1.24" or "|x" are not YAML but are obviously meant as text: take the
            # text as written. Broken flow collections and quotes stay errors.
            if raw.lstrip()[:1] in ("[", "{", '"', "'"):
                problem = getattr(exc, "problem", None) or "cannot be parsed"
                raise RecipeError(
                    "--set", key, f"value is not valid YAML: {problem}", hint="quote the value"
                ) from None
            value = raw
        parts = key.split(".")
        node: dict[str, Any] = data
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise RecipeError("--set", ".".join(parts[: i + 1]), "is not a mapping")
            node = child
        last = parts[-1]
        if len(parts) == 2 and parts[0] == "env" and value is None:
            # ``--set env.NAME=null`` removes the variable.
            node.pop(last, None)
        elif len(parts) == 2 and parts[0] == "env" and not isinstance(value, (dict, list)):
            # Env values are text: ``env.X=on`` or ``env.X=1.10`` mean the text as written.
            if not isinstance(value, str):
                value = raw.strip()
            entry = node.get(last)
            if isinstance(entry, dict):
                entry["value"] = value
            else:
                node[last] = {
                    "value": value,
                    "why": "set on the command line",
                    "evidence": [],
                    "confidence": "uncertain",
                }
        else:
            node[last] = value
    return data


# --------------------------------------------------------------------------- loading


def parse_recipe(data: object, source: str, base_dir: Path | None = None) -> Recipe:
    """Validate raw YAML data into a Recipe. ``base_dir`` resolves relative check paths."""
    r = _Reader(source)
    top = r.mapping(data, "", list(SCHEMA), REQUIRED)

    name = r.string(top["name"], "name")
    if not NAME_RE.match(name):
        raise r.fail(
            "name",
            f"{name!r} is not a valid recipe name",
            "use lowercase letters, digits, '.', '_' and '-' (it becomes an image name)",
        )

    gpu_raw = r.mapping(top["gpu"], "gpu", list(SCHEMA["gpu"]), ("vendor",))
    vendor = r.choice(gpu_raw["vendor"], "gpu.vendor", VENDORS)
    arch = r.opt_string(gpu_raw.get("arch"), "gpu.arch")
    if vendor != "none" and arch is None:
        raise r.fail("gpu.arch", f"missing for a {vendor} recipe", "e.g. arch: gfx1030 or sm_90")
    if arch is not None:
        pattern = {"amd": r"^gfx[0-9a-f]{3,4}$", "nvidia": r"^sm_\d{2,3}[a-z]?$"}.get(vendor)
        if pattern and not re.match(pattern, arch):
            example = "gfx1030" if vendor == "amd" else "sm_90"
            raise r.fail("gpu.arch", f"{arch!r} is not a {vendor} arch", f"write it like {example}")
    gpu = Gpu(vendor=vendor, arch=arch, products=r.strings(gpu_raw.get("products"), "gpu.products"))

    python = r.version(top["python"], "python", PYTHON_RE)
    rocm = None if top.get("rocm") is None else r.version(top["rocm"], "rocm")
    cuda = None if top.get("cuda") is None else r.version(top["cuda"], "cuda")
    if rocm and cuda:
        raise r.fail("cuda", "a recipe sets rocm or cuda, not both", "remove one of them")

    torch_raw = r.mapping(top["torch"], "torch", list(SCHEMA["torch"]), ("version",))
    torch_version = r.string(torch_raw["version"], "torch.version")
    torch = Torch(version=torch_version, index=r.opt_string(torch_raw.get("index"), "torch.index"))
    if torch.index is not None and not re.match(r"^https?://\S+$", torch.index):
        raise r.fail("torch.index", f"{torch.index!r} is not an http(s) URL")

    numpy = r.string(top["numpy"], "numpy")
    try:
        SpecifierSet(numpy)
    except InvalidSpecifier:
        raise r.fail("numpy", f"{numpy!r} is not a PEP 440 specifier", 'e.g. numpy: "<2"') from None

    packages = r.strings(top.get("packages"), "packages")
    for i, pkg in enumerate(packages):
        _check_requirement(r, pkg, f"packages[{i}]")

    env = _parse_env(r, top.get("env"))
    issues = _parse_issues(r, top.get("known_issues"))
    certify = _parse_certify(r, top.get("certify"), base_dir)

    return Recipe(
        name=name,
        description=r.string(top["description"], "description"),
        gpu=gpu,
        base_image=_image_ref(r, top["base_image"]),
        python=python,
        rocm=rocm,
        cuda=cuda,
        torch=torch,
        numpy=numpy,
        packages=packages,
        env=env,
        known_issues=issues,
        certify=certify,
        sources=r.strings(top.get("sources"), "sources"),
        origin=source,
    )


def _image_ref(r: _Reader, value: object) -> str:
    ref = r.string(value, "base_image")
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$", ref):
        raise r.fail("base_image", f"{ref!r} is not an image reference", "e.g. ubuntu:22.04")
    return ref


def _check_requirement(r: _Reader, text: str, path: str) -> None:
    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        raise r.fail(path, f"{text!r} is not a PEP 508 requirement: {exc}") from None
    if req.url or not any(s.operator in ("==", "===") for s in req.specifier):
        raise r.fail(path, f"{text!r} is not pinned", f"write it as {req.name}==VERSION")


def _parse_env(r: _Reader, raw: object) -> tuple[EnvVar, ...]:
    if raw is None:
        return ()
    entries = r.mapping(raw, "env", list(raw) if isinstance(raw, dict) else [])
    out = []
    for name, entry in entries.items():
        path = f"env.{name}"
        if not SHELL_NAME_RE.match(name):
            raise r.fail(
                path,
                "is not a valid environment variable name (rule env-name: POSIX shell names)",
                "use letters, digits and '_', not starting with a digit",
            )
        body = r.mapping(entry, path, ENV_ENTRY, ("value", "why", "confidence"))
        out.append(
            EnvVar(
                name=name,
                value=r.string(body["value"], f"{path}.value", allow_empty=True),
                why=r.string(body["why"], f"{path}.why"),
                evidence=r.strings(body.get("evidence"), f"{path}.evidence"),
                confidence=r.choice(body["confidence"], f"{path}.confidence", CONFIDENCES),
            )
        )
    return tuple(out)


def _parse_issues(r: _Reader, raw: object) -> tuple[KnownIssue, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise r.fail("known_issues", f"expected a list, got {_kind(raw)}")
    out = []
    for i, item in enumerate(raw):
        path = f"known_issues[{i}]"
        body = r.mapping(item, path, ISSUE, ("symptom", "workaround"))
        out.append(
            KnownIssue(
                symptom=r.string(body["symptom"], f"{path}.symptom"),
                workaround=r.string(body["workaround"], f"{path}.workaround"),
                evidence=r.strings(body.get("evidence"), f"{path}.evidence"),
            )
        )
    return tuple(out)


def _parse_certify(r: _Reader, raw: object, base_dir: Path | None) -> CertifySettings:
    if raw is None:
        return CertifySettings()
    body = r.mapping(raw, "certify", list(SCHEMA["certify"]))
    defaults = CertifySettings()
    timeout = defaults.step_timeout
    if body.get("step_timeout") is not None:
        timeout = r.number(body["step_timeout"], "certify.step_timeout")
    level = defaults.level
    if body.get("level") is not None:
        level = r.choice(body["level"], "certify.level", LEVELS)
    checks = []
    for i, item in enumerate(r.strings(body.get("extra_checks"), "certify.extra_checks")):
        path = Path(item).expanduser()
        if not path.is_absolute():
            path = (base_dir or Path.cwd()) / path
        if not path.is_file():
            raise r.fail(
                f"certify.extra_checks[{i}]",
                f"check file {str(path)!r} does not exist",
                "paths are relative to the recipe file",
            )
        checks.append(path.resolve())
    return CertifySettings(step_timeout=timeout, level=level, extra_checks=tuple(checks))


def load_recipe_file(path: Path, overrides: Sequence[str] = ()) -> Recipe:
    """Load one recipe file and apply ``--set`` overrides."""
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RecipeError(source, "", "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RecipeError(source, "", f"cannot be read: {exc}") from None
    try:
        data = yamlsrc.load(text)
    except yamlsrc.DuplicateKey as exc:
        raise RecipeError(source, exc.key, str(exc), hint="keep one of them") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise RecipeError(source, where, f"not valid YAML: {problem}") from None
    if overrides:
        if not isinstance(data, dict):
            data = {}
        data = apply_overrides(data, overrides)
        source = f"{source} (with --set {' '.join(overrides)})"
    return parse_recipe(data, source, base_dir=path.parent)
