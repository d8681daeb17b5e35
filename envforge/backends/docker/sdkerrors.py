"""The docker SDK's errors: what a call to the engine may raise, and its message on one line."""

from __future__ import annotations

import docker.errors
import requests.exceptions
import urllib3.exceptions

#: What a call to the engine may raise besides a clean API error: the SDK's own errors and
#: the transport's (requests' ReadTimeout when a wait runs out, a dropped connection).
TRANSPORT_ERRORS: tuple[type[Exception], ...] = (
    docker.errors.DockerException,
    requests.exceptions.RequestException,
    urllib3.exceptions.HTTPError,
    OSError,
)


def api_message(exc: docker.errors.APIError) -> str:
    """The engine's explanation of an API error, on one line."""
    explanation = getattr(exc, "explanation", None)
    return first_line(str(explanation or exc))


def first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    line = lines[0] if lines else text.strip()
    return line[:300]
