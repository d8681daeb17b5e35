"""Settings remembered: the user's file, a project's ``[tool.envforge]`` keys and the
environment, resolved in one place.

The user's file is TOML at ``$ENVFORGE_CONFIG``, else ``$XDG_CONFIG_HOME/envforge/config.toml``,
else ``~/.config/envforge/config.toml``; a project keeps the same keys in ``[tool.envforge]``
of its pyproject.toml (or in its envforge.toml). Each value comes from, first found:
the command's flag, the environment variable (where one exists), the project, the user's
file, else the default (none). A relative path in a file is read from that file's folder.

Nothing here is read at import time and nothing is kept: a command that needs a setting
calls :func:`resolve` (the light commands never do), and gets a frozen :class:`Settings`.
Every refusal (malformed TOML, an unknown key, a wrong type, a path that does not exist)
is one line naming the file, the key and the fix (:class:`~envforge.errors.ConfigError`,
exit 2).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal, Union

from envforge.core.yamlcheck import did_you_mean
from envforge.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.9/3.10
    import tomli as tomllib

CONFIG_ENV = "ENVFORGE_CONFIG"

Kind = Literal["dir", "file", "files", "text", "mirrors", "switch"]
Source = Literal["flag", "environment", "project", "user file", "default"]
#: What a setting holds once read: a path, paths, text (a mirror list stays its text), a
#: switch (on or off).
Held = Union[Path, tuple[Path, ...], str, bool, None]


#: The environment variable naming the signing key file (every command that signs).
SIGNING_KEY_ENV = "ENVFORGE_SIGNING_KEY"
#: The site's name, and whether node names may leave it (:mod:`envforge.core.sharing`).
SITE_ENV = "ENVFORGE_SITE"
SHARE_NODES_ENV = "ENVFORGE_SHARE_NODE_NAMES"
#: How a switch is written in the environment.
_ON, _OFF = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


@dataclasses.dataclass(frozen=True)
class Key:
    """A setting: what it holds, its flag and environment variable (None: none);
    ``project``: a project may set it too (every key does today; the field stays for a
    setting of the site only)."""

    kind: Kind
    flag: str | None
    env: str | None
    help: str
    project: bool = True


#: Every setting, in the order ``envforge config`` shows them.
KEYS: Mapping[str, Key] = {
    "backend": Key("text", "--backend", None, "build/shell backend: docker, venv"),
    "wheelhouse": Key("dir", "--wheelhouse", None, "a folder of .whl files torch comes from"),
    "ca_bundle": Key("file", "--ca-bundle", None, "a PEM bundle pip/uv trust"),
    "index_mirror": Key(
        "mirrors",
        "--index-mirror",
        "ENVFORGE_INDEX_MIRROR",
        'the default index\'s mirror URL and/or "ORIGINAL=MIRROR" index pairs',
    ),
    "base_image": Key("text", "--base-image", None, "build (docker) FROM this image"),
    "base_image_mirror": Key(
        "text",
        "--base-image-mirror",
        "ENVFORGE_BASE_IMAGE_MIRROR",
        "a registry prefix the recipe's Docker Hub base image is pulled through",
    ),
    "registry": Key("text", "--registry", None, "publish to HOST[:PORT][/NAMESPACE]"),
    "signing_key": Key("file", "--signing-key", SIGNING_KEY_ENV, "an ed25519 key file"),
    "trusted_keys": Key(
        "files", "--trust", "ENVFORGE_TRUSTED_KEYS", "a list of envforge.pub trust files"
    ),
    "site": Key(
        "text",
        None,
        SITE_ENV,
        "this site's name, recorded in each probe report (letters, digits, . _ -)",
        project=False,
    ),
    "share_node_names": Key(
        "switch",
        None,
        SHARE_NODES_ENV,
        "keep node names in what leaves the site (certificates, exports); default off",
        project=False,
    ),
}

#: What each kind holds, and an example value (the fix a refusal names).
_TYPES: Mapping[Kind, tuple[str, str]] = {
    "dir": ("a folder's path (a string)", '"~/wheels"'),
    "file": ("a file's path (a string)", '"~/certs/proxy.pem"'),
    "files": ("a list of file paths", '["~/keys/team.pub"]'),
    "text": ("a string", '"NAME"'),
    "mirrors": ("an index URL and/or ORIGINAL=MIRROR URL pairs in one string", '"http://m/simple"'),
    "switch": ("true or false", "true"),
}


@dataclasses.dataclass(frozen=True)
class Value:
    """One setting's effective value and where it came from (``origin``: the flag, the
    variable or the file)."""

    key: str
    value: Held
    source: Source
    origin: str

    def to_dict(self) -> dict[str, object]:
        shown: object = self.value
        if isinstance(self.value, Path):
            shown = str(self.value)
        elif isinstance(self.value, tuple):
            shown = [str(p) for p in self.value]
        return {"key": self.key, "value": shown, "source": self.source, "origin": self.origin}


@dataclasses.dataclass(frozen=True)
class Settings:
    """The effective settings, one :class:`Value` per key of :data:`KEYS`."""

    values: tuple[Value, ...]

    def get(self, key: str) -> Value:
        for value in self.values:
            if value.key == key:
                return value
        raise KeyError(key)

    def path(self, key: str) -> Path | None:
        value = self.get(key).value
        return value if isinstance(value, Path) else None

    def text(self, key: str) -> str | None:
        value = self.get(key).value
        return value if isinstance(value, str) else None

    def paths(self, key: str) -> tuple[Path, ...]:
        value = self.get(key).value
        return value if isinstance(value, tuple) else ()

    def switch(self, key: str) -> bool:
        """A switch's value (off when not set)."""
        return self.get(key).value is True


def config_path(environ: Mapping[str, str] | None = None) -> Path:
    """The user's settings file (it may not exist)."""
    env = os.environ if environ is None else environ
    if env.get(CONFIG_ENV):
        return Path(os.path.abspath(Path(env[CONFIG_ENV]).expanduser()))
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(os.path.abspath(Path(base).expanduser())) / "envforge" / "config.toml"


def read_user(environ: Mapping[str, str] | None = None) -> dict[str, Held]:
    """The user's file, each key checked (empty when there is none; one named by
    ``ENVFORGE_CONFIG`` must exist)."""
    env = os.environ if environ is None else environ
    path = config_path(env)
    if not path.is_file():
        if env.get(CONFIG_ENV):
            raise ConfigError(
                str(path), "", "does not exist", hint=f"create it, or unset {CONFIG_ENV}"
            )
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), "", f"cannot be read: {exc}", hint="fix its file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            str(path), "", f"is not valid TOML: {exc}", hint="fix the TOML syntax at that line"
        ) from None
    return check_table(data, path, "")


def check_table(table: Mapping[str, object], source: Path, prefix: str) -> dict[str, Held]:
    """Each of :data:`KEYS` found in ``table``, checked (a relative path is read from
    ``source``'s folder); an unknown key is refused."""
    return {
        key: check_value(key, value, source, f"{prefix}{key}")
        for key, value in table.items()
        if _known(key, source, f"{prefix}{key}")
    }


def _known(key: str, source: Path, where: str) -> bool:
    if key not in KEYS:
        near = did_you_mean(key, KEYS)
        raise ConfigError(
            str(source),
            where,
            "is not a setting envforge knows",
            hint=f"did you mean {near!r}?" if near else f"known: {', '.join(KEYS)}",
        )
    return True


def check_value(key: str, value: object, source: Path, where: str) -> Held:
    """A file's value for ``key``, checked: its type, and that a path exists."""
    kind = KEYS[key].kind
    what, example = _TYPES[kind]
    wrong = f"must be {what}, not {type(value).__name__}"
    fix = f"write it as {key} = {example}"
    if kind == "switch":
        if not isinstance(value, bool):
            raise ConfigError(str(source), where, wrong, hint=fix)
        return value
    if kind == "files":
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ConfigError(str(source), where, wrong, hint=fix)
        return tuple(_existing(Path(v), "file", source, where) for v in value)
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(str(source), where, wrong, hint=fix)
    if kind in ("text", "mirrors"):  # mirrors: parsed where used (envforge.core.mirror)
        return value
    return _existing(Path(value), kind, source, where)


def _existing(path: Path, kind: Kind, source: Path, where: str) -> Path:
    full = path.expanduser()
    if not full.is_absolute():
        full = source.parent / full
    full = Path(os.path.abspath(full))
    ok = full.is_dir() if kind == "dir" else full.is_file()
    if not ok:
        what = "folder" if kind == "dir" else "file"
        raise ConfigError(
            str(source),
            where,
            f"{full} is not an existing {what}",
            hint=f"fix the path, or remove {where.rsplit('.', 1)[-1]} from {source.name}",
        )
    return full


def _from_env(key: str, env: Mapping[str, str]) -> Held:
    name = KEYS[key].env
    raw = env.get(name, "") if name else ""
    if not raw:
        return None
    kind = KEYS[key].kind
    if kind == "switch":
        word = raw.strip().lower()
        if word not in (*_ON, *_OFF):
            raise ConfigError(
                f"${name}",
                "",
                f"is {raw!r}, not a switch",
                hint=f"set {name}=1 (on) or {name}=0 (off)",
            )
        return word in _ON
    if kind == "files":
        return tuple(Path(p) for p in raw.split(os.pathsep) if p.strip()) or None
    if kind in ("dir", "file"):
        return Path(raw).expanduser()
    return raw


def resolve(
    flags: Mapping[str, Held] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    project: Mapping[str, Held] | None = None,
    project_file: Path | None = None,
    keys: Iterable[str] | None = None,
) -> Settings:
    """Each setting from, first found: ``flags`` (the command's, None or empty: not
    given), the environment, ``project`` (its ``[tool.envforge]`` keys, read from
    ``project_file``), the user's file, else none. ``keys``: only these (the user's file
    is read only when one of them is not given on the command line or the environment)."""
    env = os.environ if environ is None else environ
    given = flags or {}
    wanted = tuple(KEYS) if keys is None else tuple(keys)
    found: dict[str, Value] = {}
    for key in wanted:
        flag = given.get(key)
        if flag is not None and flag != ():
            found[key] = Value(key, flag, "flag", KEYS[key].flag or key)
            continue
        from_env = _from_env(key, env)
        if from_env is not None:
            found[key] = Value(key, from_env, "environment", f"${KEYS[key].env}")
        elif project and project.get(key) is not None:
            where = f"{project_file or 'the project'} [tool.envforge]"
            found[key] = Value(key, project[key], "project", where)
    missing = [key for key in wanted if key not in found]
    user = read_user(env) if missing else {}
    for key in missing:
        if key in user:
            found[key] = Value(key, user[key], "user file", str(config_path(env)))
        else:
            found[key] = Value(key, None, "default", "none")
    return Settings(tuple(found[key] for key in wanted))
