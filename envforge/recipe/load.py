"""Read a recipe file (plus ``--set`` overrides) into a validated :class:`Recipe`.

Validation happens once, here. Every problem is a :class:`RecipeError` naming the file,
the key path (``env.HSA_OVERRIDE_GFX_VERSION.confidence``) and, for unknown keys, the
nearest valid one. The checks of values are those of :mod:`envforge.recipe.checks`,
which the renderer calls too: a recipe that loads renders.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from envforge.core import yamlcheck
from envforge.core.patterns import (
    CONFIDENCES,
    DEB_NAME,
    GFX_RE,
    IMAGE_RE,
    NAME_RE,
    PYTHON_RE,
    SM_RE,
    URL_RE,
    VERSION_RE,
)
from envforge.core.yamlcheck import Reader, did_you_mean
from envforge.errors import RecipeError
from envforge.recipe.checks import (
    check_meaning,
    check_renderable,
    env_name_problem,
    index_entry_problem,
    index_url_problem,
    numpy_problem,
    pin_problem,
    step_timeout_problem,
    text_problem,
    torch_version_problem,
)
from envforge.recipe.model import (
    LEVELS,
    VENDORS,
    CertifySettings,
    EnvVar,
    Gpu,
    KnownIssue,
    PackageIndex,
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
    "system_packages": None,
    "env": None,  # name → ENV_ENTRY
    "known_issues": None,  # list of ISSUE
    "certify": {"step_timeout": None, "level": None, "extra_checks": None},
    "sources": None,
}
REQUIRED = ("name", "description", "gpu", "base_image", "python", "torch", "numpy")
ENV_ENTRY = ("value", "why", "evidence", "confidence")
ISSUE = ("symptom", "workaround", "evidence")
#: A ``packages`` entry from its own index.
PACKAGE_ENTRY = ("name", "index")


def _parse_system_packages(r: yamlcheck.Reader, raw: object) -> tuple[str, ...]:
    names = r.texts(raw, "system_packages")
    for i, name in enumerate(names):
        if not DEB_NAME.fullmatch(name):
            raise r.fail(
                f"system_packages[{i}]",
                f"{name!r} is not a Debian package name",
                "write the apt name, e.g. ffmpeg or libgl1",
            )
    if len(set(names)) != len(names):
        raise r.fail("system_packages", "a package is listed twice", "list each once")
    return names


def _all_paths(schema: Mapping[str, Any], prefix: str = "") -> list[str]:
    out: list[str] = []
    for key, sub in schema.items():
        out.append(prefix + key)
        if isinstance(sub, dict):
            out.extend(_all_paths(sub, prefix + key + "."))
    return out


ALL_KEY_PATHS = tuple(_all_paths(SCHEMA))


def _misplaced(key: str, parent: str, exact: bool) -> str | None:
    """A key that belongs elsewhere in the schema (``index`` at top level → ``torch.index``)."""
    elsewhere = {p.rsplit(".", 1)[-1]: p for p in ALL_KEY_PATHS if p.rpartition(".")[0] != parent}
    if exact:
        return elsewhere.get(key)
    near = did_you_mean(key, elsewhere)
    return None if near is None else elsewhere[near]


def _reader(source: str) -> Reader:
    """The recipe flavour of the one YAML reader."""
    return Reader(
        source,
        RecipeError,
        numbers_as_text=True,
        check=text_problem,
        misplaced=_misplaced,
        required_hint="add {key}: to the recipe",
    )


def _version(r: Reader, value: object, path: str, pattern: re.Pattern[str] = VERSION_RE) -> str:
    text = r.text(value, path)
    if not pattern.match(text):
        example = '"3.10"' if pattern is PYTHON_RE else '"5.2" or "1.13.1"'
        raise r.fail(path, f"{text!r} is not a version like {example}")
    return text


# --------------------------------------------------------------------------- overrides


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Apply ``key.path=value`` overrides (value parsed as YAML) to raw recipe data.

    ``env.NAME=value`` on a scalar sets that variable's value; a new variable made this
    way is marked ``confidence: uncertain`` with "set on the command line" as its why.
    ``env.NAME=null`` removes the variable.
    """
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip(" ")
        if not sep or not key or any(not part for part in key.split(".")):
            raise RecipeError(
                "--set", item, "expected KEY.PATH=VALUE", hint="e.g. --set torch.version=2.2.2"
            )
        if yamlcheck.has_surrogate(item):
            raise RecipeError(
                "--set",
                key,
                "contains a lone surrogate (an invalid character)",
                hint="pass the value as UTF-8 text",
            )
        try:
            value = yamlcheck.parse(raw, "--set", error=RecipeError) if raw.strip() else ""
        except RecipeError as exc:
            # ">=1.24" or "|x" are not YAML but are obviously meant as text: take the
            # text as written. Broken flow collections and quotes, and values the reader
            # refuses (complex keys, deep nesting, huge numbers), stay errors.
            if raw.lstrip()[:1] in ("[", "{", '"', "'") or "not valid YAML" not in exc.message:
                raise RecipeError(
                    "--set",
                    key,
                    f"value refused: {exc.message.removeprefix('--set: ')}",
                    hint="quote the value" if "not valid YAML" in exc.message else exc.hint,
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
            elif entry is not None:
                # the file's entry is broken: say so rather than replace it
                raise RecipeError(
                    "--set",
                    key,
                    f"the recipe's env.{last} is {yamlcheck.kind(entry)}, "
                    "not a mapping with value, why and confidence",
                    hint="fix the recipe file first",
                )
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
    r = _reader(source)
    top = r.mapping(data, "", list(SCHEMA), REQUIRED)

    name = r.text(top["name"], "name")
    if not NAME_RE.match(name):
        raise r.fail(
            "name",
            f"{name!r} is not a valid recipe name",
            "lowercase letters and digits, separated by single '.', '_' or '-' "
            "(it becomes an image name)",
        )

    gpu_raw = r.mapping(top["gpu"], "gpu", list(SCHEMA["gpu"]), ("vendor",))
    vendor = r.choice(gpu_raw["vendor"], "gpu.vendor", VENDORS)
    arch = r.opt_text(gpu_raw.get("arch"), "gpu.arch")
    if vendor != "none" and arch is None:
        raise r.fail("gpu.arch", f"missing for a {vendor} recipe", "e.g. arch: gfx1030 or sm_90")
    if arch is not None:
        pattern = {"amd": GFX_RE, "nvidia": SM_RE}.get(vendor)
        if pattern and not pattern.match(arch):
            example = "gfx1030" if vendor == "amd" else "sm_90"
            raise r.fail("gpu.arch", f"{arch!r} is not a {vendor} arch", f"write it like {example}")
    gpu = Gpu(vendor=vendor, arch=arch, products=r.texts(gpu_raw.get("products"), "gpu.products"))

    python = _version(r, top["python"], "python", PYTHON_RE)
    rocm = None if top.get("rocm") is None else _version(r, top["rocm"], "rocm")
    cuda = None if top.get("cuda") is None else _version(r, top["cuda"], "cuda")
    if rocm and cuda:
        raise r.fail("cuda", "a recipe sets rocm or cuda, not both", "remove one of them")

    torch_raw = r.mapping(top["torch"], "torch", list(SCHEMA["torch"]), ("version",))
    torch_version = r.text(torch_raw["version"], "torch.version")
    _refuse(r, "torch.version", torch_version_problem(torch_version))
    torch = Torch(version=torch_version, index=r.opt_text(torch_raw.get("index"), "torch.index"))
    if torch.index is not None and not URL_RE.match(torch.index):
        raise r.fail("torch.index", f"{torch.index!r} is not an http(s) URL")

    numpy = r.text(top["numpy"], "numpy")
    _refuse(r, "numpy", numpy_problem(numpy))

    packages, indexes = _parse_packages(r, top.get("packages"))
    system = _parse_system_packages(r, top.get("system_packages"))

    env = _parse_env(r, top.get("env"))
    issues = _parse_issues(r, top.get("known_issues"))
    certify = _parse_certify(r, top.get("certify"), base_dir)

    recipe = Recipe(
        name=name,
        description=r.text(top["description"], "description"),
        gpu=gpu,
        base_image=_image_ref(r, top["base_image"]),
        python=python,
        rocm=rocm,
        cuda=cuda,
        torch=torch,
        numpy=numpy,
        packages=packages,
        package_indexes=indexes,
        system_packages=system,
        env=env,
        known_issues=issues,
        certify=certify,
        sources=r.texts(top.get("sources"), "sources"),
        origin=source,
    )
    check_renderable(recipe)
    check_meaning(recipe)
    return recipe


def _parse_packages(r: Reader, raw: object) -> tuple[tuple[str, ...], tuple[PackageIndex, ...]]:
    """``packages``: requirement texts, or ``{name: REQUIREMENT, index: URL}`` for a
    package that comes from that index only (a pinned requirement, not torch's family)."""
    if raw is None or raw == []:
        return (), ()
    items = [raw] if isinstance(raw, (str, dict)) else raw
    if not isinstance(items, list):
        raise r.fail("packages", f"expected a list, got {yamlcheck.kind(raw)}")
    packages: list[str] = []
    indexes: list[PackageIndex] = []
    seen: set[tuple[str, str]] = set()
    for i, item in enumerate(items):
        key = f"packages[{i}]"
        if not isinstance(item, dict):
            text = r.text(item, key)
            _refuse(r, key, pin_problem(text))
            _once(r, key, text, seen)
            packages.append(text)
            continue
        body = r.mapping(item, key, PACKAGE_ENTRY, PACKAGE_ENTRY)
        text = r.text(body["name"], f"{key}.name")
        url = r.text(body["index"], f"{key}.index")
        _refuse(r, f"{key}.name", pin_problem(text) or index_entry_problem(text))
        _refuse(r, f"{key}.index", index_url_problem(url))
        _once(r, f"{key}.name", text, seen)
        name = canonicalize_name(Requirement(text).name)
        if any(p.name == name for p in indexes):
            raise r.fail(f"{key}.name", f"{name} is listed twice", "list each package once")
        packages.append(text)
        indexes.append(PackageIndex(name=name, url=url))
    return tuple(packages), tuple(indexes)


def _once(r: Reader, path: str, text: str, seen: set[tuple[str, str]]) -> None:
    """Each package once (per environment marker): two pins of one package contradict
    each other or say nothing more (``torchvision`` beside ``torchvision==0.29.0``)."""
    req = Requirement(text)
    entry = (canonicalize_name(req.name), str(req.marker or ""))
    if entry in seen:
        raise r.fail(
            path,
            f"{entry[0]} is listed twice: its pins contradict or repeat each other",
            "list each package once, with one pin",
        )
    seen.add(entry)


def _refuse(r: Reader, path: str, problem: tuple[str, str] | None) -> None:
    if problem is not None:
        raise r.fail(path, *problem)


def _image_ref(r: Reader, value: object) -> str:
    ref = r.text(value, "base_image")
    if not IMAGE_RE.match(ref):
        raise r.fail("base_image", f"{ref!r} is not an image reference", "e.g. ubuntu:22.04")
    return ref


def _parse_env(r: Reader, raw: object) -> tuple[EnvVar, ...]:
    if raw is None:
        return ()
    entries = r.mapping(raw, "env", list(raw) if isinstance(raw, dict) else [])
    out = []
    for name, entry in entries.items():
        path = f"env.{name}" if name.isprintable() else f"env.{name!r}"
        _refuse(r, path, text_problem(name) or env_name_problem(name))
        body = r.mapping(entry, path, ENV_ENTRY, ("value", "why", "confidence"))
        out.append(
            EnvVar(
                name=name,
                value=r.text(body["value"], f"{path}.value", allow_empty=True),
                why=r.text(body["why"], f"{path}.why"),
                evidence=r.texts(body.get("evidence"), f"{path}.evidence"),
                confidence=r.choice(body["confidence"], f"{path}.confidence", CONFIDENCES),
            )
        )
    return tuple(out)


def _parse_issues(r: Reader, raw: object) -> tuple[KnownIssue, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise r.fail("known_issues", f"expected a list, got {yamlcheck.kind(raw)}")
    out = []
    for i, item in enumerate(raw):
        path = f"known_issues[{i}]"
        body = r.mapping(item, path, ISSUE, ("symptom", "workaround"))
        out.append(
            KnownIssue(
                symptom=r.text(body["symptom"], f"{path}.symptom"),
                workaround=r.text(body["workaround"], f"{path}.workaround"),
                evidence=r.texts(body.get("evidence"), f"{path}.evidence"),
            )
        )
    return tuple(out)


def _parse_certify(r: Reader, raw: object, base_dir: Path | None) -> CertifySettings:
    if raw is None:
        return CertifySettings()
    body = r.mapping(raw, "certify", list(SCHEMA["certify"]))
    defaults = CertifySettings()
    timeout = defaults.step_timeout
    if body.get("step_timeout") is not None:
        timeout = r.number(body["step_timeout"], "certify.step_timeout")
        _refuse(r, "certify.step_timeout", step_timeout_problem(timeout))
    level = defaults.level
    if body.get("level") is not None:
        level = r.choice(body["level"], "certify.level", LEVELS)
    checks = []
    for i, item in enumerate(r.texts(body.get("extra_checks"), "certify.extra_checks")):
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
    data = yamlcheck.load_file(path, source, error=RecipeError)
    if overrides:
        if not isinstance(data, dict):
            # --set changes a recipe; it never replaces a file that is not one.
            raise RecipeError(
                source,
                "(top level)",
                f"expected a mapping, got {yamlcheck.kind(data)}",
                hint="--set overrides keys of a recipe file; fix the file first",
            )
        data = apply_overrides(data, overrides)
        source = f"{source} (with --set {' '.join(overrides)})"
    return parse_recipe(data, source, base_dir=path.parent)


def recipe_yaml(data: Mapping[str, Any]) -> str:
    """Recipe data as a recipe file holds it (``solve --write``): keys in their order."""
    return yaml.safe_dump(dict(data), sort_keys=False, allow_unicode=True, width=100)
