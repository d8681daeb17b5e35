"""``envforge audit IMAGE``: the image's containers the audit runs in (no GPU, no network).

The audit (:func:`envforge.audit.image.collect_target`) runs its bundled file in a probe
target; here an image reference becomes those targets, one per interpreter name tried.
"""

from __future__ import annotations

import docker.errors

from envforge.backends.docker import engine as docker_engine
from envforge.backends.docker.probe_target import DockerTarget
from envforge.backends.docker.sdkerrors import TRANSPORT_ERRORS, api_message
from envforge.errors import InvalidInput, Unavailable, printable

#: Interpreters tried in an image, in order.
PYTHONS = ("python3", "python")


def image_targets(ref: str) -> list[DockerTarget]:
    """A container target of ``ref`` for each interpreter name; exit 2 when the engine
    has no such image, 4 when there is no engine."""
    client = docker_engine.connect()
    try:
        image = client.images.get(ref)
    except docker.errors.ImageNotFound:
        raise InvalidInput(
            f"no image {printable(ref)} on this engine, and no such folder",
            hint=f"docker pull {printable(ref)}, or pass a virtualenv folder",
        ) from None
    except docker.errors.APIError as exc:
        raise Unavailable(
            f"the engine cannot look up {printable(ref)}: {api_message(exc)}"
        ) from None
    except TRANSPORT_ERRORS as exc:
        raise Unavailable(f"the engine did not answer for {printable(ref)}: {exc}") from None
    image_id = str(image.attrs["Id"])
    return [DockerTarget(client, image_id, python=python) for python in PYTHONS]
