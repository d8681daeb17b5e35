"""Read a project folder: pyproject.toml (PEP 621, PEP 735) or requirements.txt.

Every problem is one :class:`~envforge.errors.ProjectError` naming the file, the key (or
line) and the fix; nothing here installs, resolves or writes. Files are read through the
bounded, non-blocking reader (:func:`envforge.core.yamlcheck.read_text`), so a FIFO or a huge
file is refused instead of hanging the command.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name

from envforge.core.patterns import DEB_NAME
from envforge.core.settings import KEYS as SETTING_KEYS
from envforge.core.settings import Held, check_value
from envforge.core.yamlcheck import did_you_mean, read_text
from envforge.errors import ProjectError
from envforge.project.model import ENVFORGE_FILE, TOOL_KEYS, Project
from envforge.project.pins import check_contradictions, expand_group, requirement

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.9/3.10
    import tomli as tomllib

#: Project files are small text files; a larger one is a wrong path.
MAX_BYTES = 1 << 20
#: ``-r`` includes deeper than this are a loop or a mistake.
MAX_INCLUDE_DEPTH = 16

PYPROJECT = "pyproject.toml"
REQUIREMENTS = "requirements.txt"

#: requirements.txt options that would route packages around the stack's indexes.
_ROUTING_OPTIONS = (
    "-i",
    "--index-url",
    "--extra-index-url",
    "-f",
    "--find-links",
    "--no-index",
    "--trusted-host",
    "--pre",
    "--prefer-binary",
    "--only-binary",
    "--no-binary",
    "--use-feature",
    "-e",
    "--editable",
)
_INCLUDE_RE = re.compile(r"^(-r|--requirement|-c|--constraint)(?:\s*=\s*|\s+)(\S+)$")
_HASH_RE = re.compile(r"\s+--hash[=\s]\S+")
_OPTION_RE = re.compile(r"--?[A-Za-z][A-Za-z0-9-]{0,30}")
_NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")


def load_project(
    folder: Path, *, extras: Sequence[str] = (), groups: Sequence[str] = ()
) -> Project:
    """The project in ``folder``: pyproject.toml when present, else requirements.txt.

    ``extras`` and ``groups`` (from the command line) add to those ``[tool.envforge]``
    names; every one must exist in the project.
    """
    if not folder.is_dir():
        raise ProjectError(
            str(folder),
            "",
            "is not a project folder",
            hint="give the folder holding pyproject.toml or requirements.txt",
        )
    root = folder.resolve()
    if (root / PYPROJECT).exists():
        return _from_pyproject(root, tuple(extras), tuple(groups))
    if (root / REQUIREMENTS).exists():
        return _from_requirements(root, tuple(extras), tuple(groups))
    raise ProjectError(
        str(root),
        "",
        f"has neither {PYPROJECT} nor {REQUIREMENTS}",
        hint=f"add one, or run `envforge init {root}` after writing it",
    )


# --------------------------------------------------------------------------- pyproject.toml


def _read_toml(path: Path) -> dict[str, Any]:
    text = read_text(path, error=ProjectError, max_bytes=MAX_BYTES)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProjectError(
            str(path), "", f"is not valid TOML: {exc}", hint="fix the TOML syntax at that line"
        ) from None
    except RecursionError:
        raise ProjectError(str(path), "", "is nested too deeply", hint="flatten it") from None
    return data


def _table(data: Mapping[str, Any], key: str, source: Path) -> Mapping[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, Mapping):
        raise ProjectError(
            str(source),
            key,
            f"must be a table, not {type(value).__name__}",
            hint=f"write it as [{key}]",
        )
    return value


def _str_list(value: object, source: Path, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ProjectError(
            str(source),
            key,
            "must be a list of strings",
            hint=f'write it as {key.rsplit(".", 1)[-1]} = ["..."]',
        )
    return tuple(value)


def _from_pyproject(root: Path, extras: tuple[str, ...], groups: tuple[str, ...]) -> Project:
    path = root / PYPROJECT
    data = _read_toml(path)
    project = _table(data, "project", path)
    settings = _settings(
        _table(_table(data, "tool", path), "envforge", path), path, "tool.envforge"
    )
    extras = _merge(settings.get("extras", ()), extras)
    groups = _merge(settings.get("groups", ()), groups)
    requirements = [
        *_requirements(project.get("dependencies", []), path, "project.dependencies"),
        *_optional(project, extras, path),
        *_groups(data, groups, path),
    ]
    check_contradictions(requirements, path)
    requires_python = project.get("requires-python")
    if requires_python is not None:
        requires_python = _python_spec(requires_python, path)
    name = project.get("name")
    if name is not None and (not isinstance(name, str) or not _NAME_RE.match(name)):
        raise ProjectError(
            str(path),
            "project.name",
            f"{name!r} is not a project name",
            hint="use letters, digits, '.', '_' and '-'",
        )
    return Project(
        root=root,
        source=path,
        name=canonicalize_name(name or root.name),
        requirements=_unique(requirements),
        recipe=_recipe(settings),
        checks=settings.get("checks", ()),
        extras=extras,
        groups=groups,
        requires_python=requires_python,
        installable=bool(project) or (root / "setup.py").exists(),
        settings_file=path if settings else None,
        system_packages=settings.get("system_packages", ()),
        skip_imports=settings.get("skip_imports", ()),
        settings=_remembered(settings),
    )


def _merge(first: Iterable[str], second: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys([*first, *second]))


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def _python_spec(value: object, path: Path) -> str:
    try:
        if not isinstance(value, str):
            raise InvalidSpecifier(str(value))
        SpecifierSet(value)
    except InvalidSpecifier:
        raise ProjectError(
            str(path),
            "project.requires-python",
            f"{value!r} is not a PEP 440 specifier",
            hint='write it like requires-python = ">=3.10"',
        ) from None
    return value


def _requirements(value: object, path: Path, key: str) -> list[str]:
    items = _str_list(value, path, key)
    return [_requirement(item, str(path), f"{key}[{i}]") for i, item in enumerate(items)]


def _requirement(text: str, source: str, key: str) -> str:
    return requirement(text, source, key)


def _optional(project: Mapping[str, Any], extras: tuple[str, ...], path: Path) -> list[str]:
    table = _table(project, "optional-dependencies", path)
    found: list[str] = []
    for extra in extras:
        if extra not in table:
            near = did_you_mean(extra, table)
            raise ProjectError(
                str(path),
                "project.optional-dependencies",
                f"has no extra {extra!r}",
                hint=f"did you mean {near!r}?"
                if near
                else f"known extras: {', '.join(sorted(table)) or 'none'}",
            )
        found += _requirements(table[extra], path, f"project.optional-dependencies.{extra}")
    return found


def _groups(data: Mapping[str, Any], groups: tuple[str, ...], path: Path) -> list[str]:
    """PEP 735 dependency groups, ``{include-group = "..."}`` entries followed."""
    table = _table(data, "dependency-groups", path)
    found: list[str] = []
    for group in groups:
        found += expand_group(table, group, path)
    return found


# --------------------------------------------------------------------------- [tool.envforge]


def _settings(table: Mapping[str, Any], path: Path, prefix: str) -> dict[str, Any]:
    """``[tool.envforge]`` (or envforge.toml), each key checked."""
    settings: dict[str, Any] = {}
    for key, value in table.items():
        where = f"{prefix}.{key}" if prefix else key
        if key in SETTING_KEYS and SETTING_KEYS[key].project:  # envforge.core.settings
            settings[key] = check_value(key, value, path, where)
            continue
        if key in SETTING_KEYS:
            raise ProjectError(
                str(path),
                where,
                "is a setting of the site, not of a project",
                hint="set it in the user's settings file (envforge config path) instead",
            )
        if key not in TOOL_KEYS:
            known = [*TOOL_KEYS, *(k for k, v in SETTING_KEYS.items() if v.project)]
            near = did_you_mean(key, known)
            raise ProjectError(
                str(path),
                where,
                "is not a setting envforge knows",
                hint=f"did you mean {near!r}?" if near else f"known: {', '.join(known)}",
            )
        if key == "recipe":
            if not isinstance(value, str) or not value.strip():
                raise ProjectError(
                    str(path),
                    where,
                    f"must be {TOOL_KEYS[key]}",
                    hint='write it as recipe = "auto"',
                )
            settings[key] = value
            continue
        if key == "skip_imports":
            settings[key] = _skip_imports(value, path, where)
            continue
        items = _str_list(value, path, where)
        if any(not item.strip() or "\n" in item or "\x00" in item for item in items):
            raise ProjectError(
                str(path),
                where,
                "holds an empty or multi-line entry",
                hint="one check per string, on one line",
            )
        if key == "system_packages":
            _check_system_packages(items, path, where)
        settings[key] = items
    return settings


def _remembered(settings: Mapping[str, Any]) -> tuple[tuple[str, Held], ...]:
    """The :mod:`envforge.core.settings` keys the project sets, in their order."""
    return tuple((key, settings[key]) for key in SETTING_KEYS if key in settings)


_SKIP_HINT = 'write it as skip_imports = [{module = "blackd", reason = "needs black[d]"}]'


def _skip_imports(value: object, path: Path, where: str) -> tuple[tuple[str, str], ...]:
    """``skip_imports``: a list of ``{module, reason}`` tables, a top-level module name
    (an identifier) and a one-line reason each, every module once."""
    if not isinstance(value, list):
        raise ProjectError(str(path), where, "must be a list of tables", hint=_SKIP_HINT)
    found: dict[str, str] = {}
    for i, item in enumerate(value):
        key = f"{where}[{i}]"
        if not isinstance(item, Mapping):
            raise ProjectError(str(path), key, "must be a table {module, reason}", hint=_SKIP_HINT)
        unknown = sorted(set(item) - {"module", "reason"})
        if unknown:
            raise ProjectError(
                str(path),
                f"{key}.{unknown[0]}",
                "is not a key of skip_imports",
                hint="keep module and reason only",
            )
        module, reason = item.get("module"), item.get("reason")
        if not isinstance(module, str) or not module.isidentifier():
            what = "is missing" if module is None else f"{module!r} is not a top-level module name"
            raise ProjectError(
                str(path),
                f"{key}.module",
                what,
                hint='name the module as imported, e.g. module = "blackd"',
            )
        if not isinstance(reason, str) or not reason.strip() or "\n" in reason:
            raise ProjectError(
                str(path),
                f"{key}.reason",
                "must say why in one line",
                hint=f'add reason = "..." for {module}',
            )
        if module in found:
            raise ProjectError(str(path), key, f"skips {module} twice", hint="list each once")
        found[module] = " ".join(reason.split())
    return tuple(found.items())


def _check_system_packages(names: tuple[str, ...], path: Path, where: str) -> None:
    for i, name in enumerate(names):
        if not DEB_NAME.fullmatch(name):
            raise ProjectError(
                str(path),
                f"{where}[{i}]",
                f"{name!r} is not a Debian package name",
                hint="write the apt name, e.g. ffmpeg or libgl1",
            )
    if len(set(names)) != len(names):
        raise ProjectError(str(path), where, "lists a package twice", hint="list each once")


def _recipe(settings: Mapping[str, Any]) -> str | None:
    value = settings.get("recipe")
    return value if isinstance(value, str) else None


# --------------------------------------------------------------------------- requirements.txt


def _from_requirements(root: Path, extras: tuple[str, ...], groups: tuple[str, ...]) -> Project:
    path = root / REQUIREMENTS
    requirements: list[str] = []
    constraints: list[str] = []
    _inside(root, path, path, "")
    _read_requirements(path, requirements, constraints, (), constraint=False, root=root)
    check_contradictions([*requirements, *constraints], path)
    settings_path = root / ENVFORGE_FILE
    settings: dict[str, Any] = {}
    if settings_path.exists():
        settings = _settings(_read_toml(settings_path), settings_path, "")
    if extras or groups:
        raise ProjectError(
            str(path),
            "",
            "a requirements.txt project has no extras or dependency groups",
            hint="drop --extra, or use a pyproject.toml",
        )
    return Project(
        root=root,
        source=path,
        name=canonicalize_name(root.name),
        requirements=_unique(requirements),
        constraints=_unique(constraints),
        recipe=_recipe(settings),
        checks=settings.get("checks", ()),
        installable=(root / "setup.py").exists(),
        settings_file=settings_path if settings else None,
        system_packages=settings.get("system_packages", ()),
        skip_imports=settings.get("skip_imports", ()),
        settings=_remembered(settings),
    )


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """(first line number, line) with ``\\`` continuations joined and comments removed."""
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if line:
            yield start, line
    if pending.strip():
        yield start, pending.strip()


def _read_requirements(
    path: Path,
    requirements: list[str],
    constraints: list[str],
    seen: tuple[Path, ...],
    *,
    constraint: bool,
    root: Path,
) -> None:
    resolved = path.resolve()
    if resolved in seen or len(seen) >= MAX_INCLUDE_DEPTH:
        chain = " -> ".join(p.name for p in (*seen, resolved))
        raise ProjectError(
            str(path),
            "",
            f"includes form a loop or are too deep ({chain})",
            hint="remove the -r/-c line that comes back to an earlier file",
        )
    text = read_text(path, error=ProjectError, max_bytes=MAX_BYTES)
    for number, line in _logical_lines(text):
        where = f"line {number}"
        include = _INCLUDE_RE.match(line)
        if include:
            target = path.parent / include.group(2)
            is_constraint = constraint or include.group(1) in ("-c", "--constraint")
            _inside(root, target, path, where)
            if not target.is_file():
                raise ProjectError(
                    str(path),
                    where,
                    f"includes {include.group(2)!r}, which is not a file",
                    hint="fix the path (relative to this file)",
                )
            _read_requirements(
                target,
                requirements,
                constraints,
                (*seen, resolved),
                constraint=is_constraint,
                root=root,
            )
            continue
        if line.startswith("-"):
            _refuse_option(line, path, where)
        req = _requirement(_HASH_RE.sub("", line).strip(), str(path), where)
        (constraints if constraint else requirements).append(req)


def _inside(root: Path, target: Path, path: Path, where: str) -> None:
    """Refuse ``target`` (an include, or requirements.txt itself) unless it is inside
    the project folder once every link is resolved: an include of ``/etc/shadow`` or
    ``/proc/self/environ`` is never read."""
    try:
        real = target.resolve()
    except (OSError, RuntimeError):  # a symlink loop
        real = None
    if real is None or not real.is_relative_to(root):
        what = "includes a file" if where else "is a link to a file"
        raise ProjectError(
            str(path),
            where,
            f"{what} outside the project folder {root}",
            hint="keep -r/-c files inside the project (copy the file in)",
        )


def _refuse_option(line: str, path: Path, where: str) -> None:
    option = re.split(r"[\s=]", line, maxsplit=1)[0]
    if not _OPTION_RE.fullmatch(option):
        option = "this option"
    if option in _ROUTING_OPTIONS:
        raise ProjectError(
            str(path),
            where,
            f"{option} is not allowed: the stack decides where torch and "
            "its companions come from, and ENVFORGE_INDEX_MIRROR where the rest come from",
            hint=f"remove the {option} line (install the project itself with --project)",
        )
    raise ProjectError(
        str(path),
        where,
        f"{option!r} is an option envforge does not read",
        hint="keep requirement lines, -r FILE and -c FILE",
    )
