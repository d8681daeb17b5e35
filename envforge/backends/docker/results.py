"""What the Docker backend's ``build`` and ``certify`` return."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envforge.container.refs import certified_ref
from envforge.errors import CertificationFailed
from envforge.recipe.model import Recipe

if TYPE_CHECKING:
    from envforge.backends.docker.certification import Outcome
    from envforge.backends.docker.images import BuildResult
    from envforge.probe.report import ProbeReport


@dataclass(frozen=True)
class Certified:
    """One image certified (pass or fail), and the tags it was given on a pass."""

    recipe: Recipe
    outcome: Outcome
    tags: tuple[str, ...] = ()
    #: The certified tag (None: the recipe's, ``envforge/RECIPE:STACK``; a project's
    #: image has its own, :func:`envforge.backends.docker.projects.project_ref`).
    ref: str | None = None

    @property
    def certified(self) -> bool:
        return self.outcome.passed

    @property
    def certified_tag(self) -> str:
        return self.ref or certified_ref(self.recipe.name, self.recipe.stack_tag)

    def to_dict(self) -> dict[str, Any]:
        outcome = self.outcome
        return {
            "certified": outcome.passed,
            "image": outcome.certified_image,
            "tags": [self.certified_tag, *self.tags] if outcome.passed else [],
            "certificate": outcome.certificate.digest,
            "certificate_path": str(outcome.stored_at),
            "status": outcome.certificate.status,
            "failing_step": outcome.certificate.failing_step,
        }

    @property
    def report(self) -> ProbeReport:
        return self.outcome.report

    def facts(self) -> list[tuple[str, str]]:
        """The certificate rows of a summary (digest, signer, the certified tag)."""
        cert = self.outcome.certificate
        tags = self.to_dict()["tags"]
        return [
            ("certificate", cert.digest),
            ("signed by", cert.signed_by or "unsigned"),
            ("certified image", ", ".join(tags) if tags else "not tagged"),
        ]

    def printed(self) -> str:
        return self.certified_tag

    def closing(self) -> str | None:
        return None

    def failure(self) -> CertificationFailed | None:
        """The error to raise when the probe did not pass (None: it passed)."""
        if self.certified:
            return None
        return CertificationFailed(
            f"certification of {self.recipe.name} failed at step "
            f"{self.outcome.certificate.failing_step}; "
            f"{self.certified_tag} was not tagged",
            hint="see the step detail above; envforge doctor checks the host",
        )


@dataclass(frozen=True)
class DockerBuildResult:
    """An image built from a recipe and, unless ``certify=False``, its certification."""

    recipe: Recipe
    build: BuildResult
    #: None when the build was not certified (``certify=False``).
    certification: Certified | None
    #: Extra tags given (``--tag``).
    tags: tuple[str, ...] = ()
    #: The certified tag (None: the recipe's; see :attr:`Certified.ref`).
    ref: str | None = None

    @property
    def image_id(self) -> str:
        return self.build.image_id

    @property
    def certified(self) -> bool:
        return self.certification is not None and self.certification.certified

    @property
    def report(self) -> ProbeReport | None:
        return self.certification.report if self.certification is not None else None

    def facts(self) -> list[tuple[str, str]]:
        if self.certification is None:
            return [("image", self.image_id), ("certified", "no (--no-certify)")]
        return self.certification.facts()

    def printed(self) -> str:
        """The certified tag; the image ID when nothing was certified (``--no-certify``)."""
        if self.certification is None:
            return self.image_id
        return self.certification.certified_tag

    def closing(self) -> str | None:
        if self.certification is not None:
            return None
        ref = self.ref or certified_ref(self.recipe.name, self.recipe.stack_tag)
        return f"not certified (--no-certify): {ref} left as it was"

    def failure(self) -> CertificationFailed | None:
        return self.certification.failure() if self.certification is not None else None

    def to_dict(self) -> dict[str, Any]:
        result = self.build
        data: dict[str, Any] = {
            "recipe": self.recipe.name,
            "candidate": result.image_id,
            "build_seconds": round(result.seconds, 3),
            "steps_cached": sum(1 for s in result.steps if s.cached),
            "steps_rebuilt": len(result.rebuilt),
            "steps": len(result.steps),
        }
        if self.certification is None:
            data.update({"certified": False, "tags": list(self.tags)})
        else:
            data.update(self.certification.to_dict())
        return data
