"""A backend that is neither docker nor venv: it records what each command handed it.

It implements :class:`envforge.backends.Backend` as an object (a module would do the
same); registering it in ``BACKENDS`` is all a command needs to route to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envforge.backends.base import BackendOption, HostCheck, Options
from envforge.errors import CertificationFailed
from envforge.host.detect import HostInfo
from envforge.host.doctor import Finding
from envforge.probe.report import ProbeReport
from envforge.recipe.model import Recipe


@dataclass(frozen=True)
class FakeResult:
    recipe: str
    certified: bool = True
    report: ProbeReport | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"recipe": self.recipe, "backend": "fake", "certified": self.certified}

    def facts(self) -> list[tuple[str, str]]:
        return [("backend", "fake")]

    def printed(self) -> str:
        return f"fake:{self.recipe}"

    def closing(self) -> str | None:
        return f"{self.recipe}: ready on the fake backend"

    def failure(self) -> CertificationFailed | None:
        return None if self.certified else CertificationFailed("fake probe failed")


@dataclass
class FakeBackend:
    """Records (command, recipe name, options) per call; ``problem`` fails the quick check."""

    problem: str | None = None
    declared: tuple[BackendOption, ...] = ()
    calls: list[tuple[str, str, Options]] = field(default_factory=list)
    ran: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    step_timeouts: list[float] = field(default_factory=list)

    def cli_options(self) -> tuple[BackendOption, ...]:
        return self.declared

    def runs_images(self) -> bool:
        return False

    def describe(self, recipe: Recipe) -> str:
        return f"fake {recipe.name}"

    def serves(self, recipe: Recipe, options: Options) -> tuple[bool, str]:
        return True, ""

    def build(self, recipe: Recipe, options: Options) -> FakeResult:
        self.calls.append(("build", recipe.name, options))
        return FakeResult(recipe.name)

    def certify(self, recipe: Recipe, options: Options) -> FakeResult:
        self.calls.append(("certify", recipe.name, options))
        return FakeResult(recipe.name)

    def check(self, recipe: Recipe, options: Options, *, step_timeout: float) -> str | None:
        self.calls.append(("check", recipe.name, options))
        self.step_timeouts.append(step_timeout)
        return self.problem

    def run(self, recipe: Recipe, argv: Sequence[str], options: Options) -> int:
        self.calls.append(("run", recipe.name, options))
        self.ran.append((recipe.name, tuple(argv)))
        return 3

    def findings(self, recipe: Recipe | None, host: HostInfo, check: HostCheck) -> list[Finding]:
        if check.required:
            return [Finding("fake", "block", "the fake backend was asked", "nothing to fix")]
        return [Finding("fake", "warn", "the fake backend was asked", "nothing to fix")]

    def disk_need(self, vendor: str) -> tuple[int, Path]:
        return 1, Path("/")
