"""The stack's pins win: a project requirement they do not satisfy stops the build.

:func:`check_fits` runs before anything is built or resolved. For torch, the companions
the stack pins and NumPy, each project requirement must admit what the stack installs;
otherwise one line names both sides, e.g. ``project requires torch<2.0; the cpu stack
pins torch 2.13.0+cpu``. Everything else is left to the resolver (uv, with the stack's
pins as constraints).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from envforge.errors import InvalidInput
from envforge.project.model import Project
from envforge.stack import Stack

#: NumPy releases the bound check tries (a bound and a project requirement conflict when
#: no version of this grid satisfies both): every X.Y.Z for majors 1-3.
_NUMPY_GRID = tuple(
    Version(f"{major}.{minor}.{patch}")
    for major in (1, 2, 3)
    for minor in range(40)
    for patch in range(6)
)


def marker_environment(python: str, machine: str = "x86_64") -> dict[str, str]:
    """PEP 508 marker values for the stack's interpreter on Linux."""
    return {
        "python_version": python,
        "python_full_version": f"{python}.0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "os_name": "posix",
        "platform_machine": machine,
    }


def _applies(marker: Marker | None, environment: Mapping[str, str]) -> bool:
    return marker is None or marker.evaluate(dict(environment))


def pinned_versions(stack: Stack) -> dict[str, str]:
    """Canonical name -> the exact version the stack installs: torch, the companions and
    the recipe's ``name==VERSION`` packages."""
    pins = {"torch": stack.torch.split("==", 1)[1]}
    for line in (*(pin.requirement for pin in stack.companions), *stack.packages):
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        exact = [s.version for s in req.specifier if s.operator == "=="]
        if len(exact) == 1 and not exact[0].endswith(".*"):
            pins[canonicalize_name(req.name)] = exact[0]
    return pins


def _problem(req: Requirement, pins: Mapping[str, str], stack: Stack, label: str) -> str | None:
    name = canonicalize_name(req.name)
    if name in pins:
        version = Version(pins[name])
        if req.url:
            return f"project requires {req} (a URL); the {label} stack pins {name} {version}"
        if not req.specifier.contains(version, prereleases=True):
            return f"project requires {req}; the {label} stack pins {name} {version}"
        return None
    if name == "numpy" and not req.url:
        bound = SpecifierSet(stack.numpy_bound.strip())
        wanted = req.specifier & bound
        if not any(wanted.contains(v, prereleases=False) for v in _NUMPY_GRID):
            return f"project requires {req}; the {label} stack bounds numpy{bound}"
    return None


def check_fits(
    project: Project,
    stack: Stack,
    *,
    label: str,
    python: str,
    requirements: Iterable[str] | None = None,
) -> None:
    """Raise :class:`InvalidInput` for the first project requirement the stack's pins do
    not satisfy. ``label`` names the stack in the message (the recipe's name)."""
    pins = pinned_versions(stack)
    environment = marker_environment(python)
    for line in project.requirements if requirements is None else requirements:
        try:
            req = Requirement(line)
        except InvalidRequirement:  # checked when the project was read
            continue
        if not _applies(req.marker, environment):
            continue
        problem = _problem(req, pins, stack, label)
        if problem is not None:
            raise InvalidInput(
                f"{project.source}: {problem}",
                hint=f"relax the requirement in {project.source.name}, or choose a recipe "
                "whose stack fits it (envforge solve ARCH --torch VERSION)",
            )
    if project.requires_python and not SpecifierSet(project.requires_python).contains(
        f"{python}.0", prereleases=True
    ):
        raise InvalidInput(
            f"{project.source}: project requires Python {project.requires_python}; the "
            f"{label} stack uses Python {python}",
            hint="choose a recipe with a Python the project supports, or widen requires-python",
        )
