"""PEP 508 requirement lines, with packaging's parser imported on first use.

``packaging.requirements`` brings its markers, its tokenizer and ``packaging.utils``,
which imports ``packaging.tags`` and with it ``logging``, ``subprocess`` and
``platform``: about 13 ms, a fifth of starting Python with click and PyYAML. ``show``,
``validate`` and ``solve`` mostly read recipes without ``packages:`` entries, so the
modules they load (the recipe model, the stack, the companion and extension tables)
reach the parser through here: only a requirement line to read loads it.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from packaging.requirements import Requirement


def canonical_name(name: str) -> str:
    """A distribution name in its normal form (PEP 503: lower case, runs of ``-_.`` as
    one ``-``), as ``packaging.utils.canonicalize_name`` writes it, without importing
    ``packaging.utils`` (which loads ``packaging.tags``)."""
    value = name.lower().replace("_", "-").replace(".", "-")
    while "--" in value:
        value = value.replace("--", "-")
    return value


def requirement(text: str) -> Requirement:
    """``packaging.requirements.Requirement(text)``; its ``InvalidRequirement`` (a
    ``ValueError``) when ``text`` is not PEP 508."""
    made: Requirement = _packaging()[0].Requirement(text)
    return made


def parse(text: str) -> Requirement | None:
    """The requirement ``text`` is, or None when it is not PEP 508."""
    module = _packaging()[0]
    try:
        made: Requirement = module.Requirement(text)
    except module.InvalidRequirement:
        return None
    return made


def name_of(text: str) -> str | None:
    """The canonical distribution name a requirement line names; None if it is not PEP 508."""
    req = parse(text)
    return None if req is None else canonical_name(req.name)


def wheel_version(filename: str) -> str | None:
    """The version in a wheel's file name (PEP 427), None when it is not a wheel's name."""
    utils = _packaging()[1]
    try:
        return str(utils.parse_wheel_filename(filename)[1])
    except utils.InvalidWheelFilename:
        return None


def _packaging() -> tuple[ModuleType, ModuleType]:
    """``packaging.requirements`` and ``packaging.utils``, imported on first use."""
    from packaging import requirements, utils  # noqa: PLC0415 - see the module's doc

    return requirements, utils
