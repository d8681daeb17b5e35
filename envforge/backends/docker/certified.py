"""The recipe's certified image, checked before every use (the venv backend checks its
venv's marker the same way).

The tag ``envforge/RECIPE:STACK`` is only a name: anyone with the engine can point it at
another image (``docker commit`` re-tagged, an image built ``FROM`` it, another recipe's
certified image). :func:`image_for_use` is the one place the Docker path turns that name
into an image it runs -- ``shell`` and the quick probe before a fallback -- and it runs
nothing whose certificate does not certify it for this recipe
(:func:`.push.image_binding` and :func:`.push.recipe_mismatch`,
the checks ``publish`` and ``verify`` make too). ``certify RECIPE`` probes what the tag
names whatever it is (that is how an image becomes certified) and says when it is not the
certified one (:func:`tag_note`).
"""

from __future__ import annotations

from collections.abc import Callable

from envforge.backends.docker.client import EngineClient
from envforge.backends.docker.images import inspect_image
from envforge.backends.docker.push import (
    certificate_of,
    image_binding,
    older_format,
    other_version,
    recipe_mismatch,
)
from envforge.container.refs import ImageInfo, certified_ref
from envforge.errors import CertificationFailed, InvalidInput, Unavailable
from envforge.recipe.model import Recipe

Say = Callable[[str], None]


def image_for_use(
    engine: EngineClient,
    recipe: Recipe,
    *,
    image: str | None,
    say: Say,
    ref: str | None = None,
    build: str | None = None,
) -> ImageInfo:
    """The image to run for ``recipe``: ``image`` when asked for (run as asked, with a
    warning when it is not certified for the recipe), else the recipe's certified tag,
    which must name an image its certificate certifies for this recipe and stack
    (:class:`CertificationFailed`, exit 1, naming the fix otherwise). Run the returned
    ``id``, never the tag again: a tag can move between this check and the run.
    ``ref``: the certified tag to use instead of the recipe's (a project's image), and
    ``build`` the command that makes it (default ``envforge build RECIPE``)."""
    build = build or f"envforge build {recipe.name}"
    ref = image or ref or certified_ref(recipe.name, recipe.stack_tag)
    info = inspect_image(engine, ref)
    if info is None:
        if image is None:
            raise Unavailable(
                f"no certified image {ref} on this engine",
                hint=f"{build} (or pass --image REF)",
            )
        raise InvalidInput(f"no image {image} on this engine", hint="docker images")
    problem = _problem(info, ref, recipe)
    if problem is not None and image is not None:
        say(f"warning: {problem}; running it as asked")
    elif problem is not None:
        raise CertificationFailed(
            problem,
            hint=f"{build} makes and certifies it again (or pass --image REF to run another image)",
        )
    else:
        for line in _notes(info, ref, recipe):
            say(f"note: {line}")
    return info


def tag_note(info: ImageInfo, ref: str, recipe: Recipe) -> str | None:
    """For ``certify RECIPE``: the line saying that the tag ``ref`` does not name the image
    its certificate certifies (None when it does)."""
    problem = _problem(info, ref, recipe)
    if problem is None:
        return None
    return f"note: {problem}; certifying the image it names now"


def _problem(info: ImageInfo, ref: str, recipe: Recipe) -> str | None:
    """Why ``info`` (named ``ref``) may not run as ``recipe``'s certified image."""
    try:
        cert = certificate_of(info, what=ref)
    except CertificationFailed as exc:
        return exc.message
    problems = image_binding(cert, info)
    if problems:
        return f"{ref} is not the image its certificate certifies: {problems[0]}"
    return recipe_mismatch(cert, recipe, ref)


def _notes(info: ImageInfo, ref: str, recipe: Recipe) -> list[str]:
    """What a user should know about a certified image that may run: an older certificate
    format, a certificate for another version of the recipe."""
    cert = certificate_of(info, what=ref)
    notes: list[str] = []
    partial = older_format(cert, ref)
    if partial is not None:
        notes.append(f"{partial}; envforge certify {recipe.name} binds all of it")
    stale = other_version(cert, recipe, ref)
    if stale is not None:
        notes.append(f"{stale}; envforge build {recipe.name} certifies the current one")
    return notes
