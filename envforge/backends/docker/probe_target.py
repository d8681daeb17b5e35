"""The probe runner's target for a container (see :mod:`envforge.probe.target`)."""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import ClassVar

import docker.errors
import docker.types

from envforge.backends.docker.client import ContainerModel, EngineClient
from envforge.backends.docker.containers import (
    container_kwargs,
    create_container,
    put_file,
    remove_by_name,
    remove_container,
    sigint_deferred,
    unique_name,
)
from envforge.backends.docker.leftovers import bound
from envforge.backends.docker.sdkerrors import TRANSPORT_ERRORS, api_message
from envforge.container.devices import DeviceFlags
from envforge.errors import Unavailable
from envforge.probe.target import LineQueue, container_exit_status

#: How an attach stream ends when its container is killed under the reader.
_STREAM_END: tuple[type[Exception], ...] = (*TRANSPORT_ERRORS, ValueError)

#: Where the probe worker and its spec are copied into the candidate container.
_PROBE_DIR = "/tmp"
_PROBE_WORKER = "envforge_probe_worker.py"
_PROBE_SPEC = "envforge_probe_spec.json"
_STDERR_KEEP = 200
_EXIT_WAIT = 5.0


class ContainerHandle:
    """A running probe container, seen as the runner's ``WorkerHandle``.

    A pump thread reads the attached (demultiplexed) stdout/stderr: stdout is split into
    lines for :meth:`read_line`, stderr is kept as a tail for :meth:`stderr_tail`.
    """

    def __init__(self, client: EngineClient, container: ContainerModel) -> None:
        self._client = client
        self._container = container
        self._lines = LineQueue()
        self._stderr: collections.deque[str] = collections.deque(maxlen=_STDERR_KEEP)
        self._stopped = False
        self._status: tuple[int | None, str | None] | None = None
        self.oom_killed = False
        self._stream = client.api.attach(
            str(container.id), stdout=True, stderr=True, stream=True, logs=True, demux=True
        )
        self._thread = threading.Thread(target=self._pump, name="probe-attach", daemon=True)

    def begin(self) -> None:
        self._thread.start()

    def _pump(self) -> None:
        out_buf = b""
        err_buf = b""
        try:
            for frame in self._stream:
                out, err = frame if isinstance(frame, tuple) else (frame, None)
                if out:
                    out_buf += out
                    *lines, out_buf = out_buf.split(b"\n")
                    for raw in lines:
                        self._lines.put(raw.decode("utf-8", errors="replace").rstrip("\r"))
                if err:
                    err_buf += err
                    *lines, err_buf = err_buf.split(b"\n")
                    for raw in lines:
                        self._stderr.append(raw.decode("utf-8", errors="replace").rstrip("\r"))
        except _STREAM_END:
            # The stream ends with the container, however it ends (a kill closes the
            # socket under the reader: an OSError, or ValueError on a closed file).
            pass
        finally:
            if out_buf:
                self._lines.put(out_buf.decode("utf-8", errors="replace"))
            if err_buf:
                self._stderr.append(err_buf.decode("utf-8", errors="replace"))
            self._lines.close()

    def read_line(self, timeout: float) -> str | None:
        return self._lines.read_line(timeout)

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            with sigint_deferred(), suppress(*TRANSPORT_ERRORS):
                self._container.kill()
        self._thread.join(timeout=5.0)

    def exit_status(self) -> tuple[int | None, str | None]:
        if self._status is not None:
            return self._status
        code: int | None = None
        try:
            result = self._container.wait(timeout=_EXIT_WAIT)
            code = int(result.get("StatusCode", -1))
        except TRANSPORT_ERRORS:  # requests' ReadTimeout: it did not exit in time
            self.stop()
            try:
                code = int(self._container.wait(timeout=_EXIT_WAIT).get("StatusCode", -1))
            except TRANSPORT_ERRORS:
                code = None
        try:
            self._container.reload()
            self.oom_killed = bool(self._container.attrs.get("State", {}).get("OOMKilled"))
        except TRANSPORT_ERRORS:
            pass
        self._thread.join(timeout=2.0)
        self._status = container_exit_status(code)
        return self._status

    def stderr_tail(self, lines: int = 20) -> str:
        return "\n".join(list(self._stderr)[-lines:])


@dataclass(frozen=True)
class DockerTarget:
    """The probe runner's target for a container of ``image`` (see envforge.probe.target).

    The container has no network, the recipe's env vars (passed in by the runner) and
    this host's device flags. The worker and its spec are copied in with ``put_archive``
    before start. Leaving :meth:`start` by any route kills and removes the container.
    """

    client: EngineClient
    image: str
    flags: DeviceFlags = field(default_factory=DeviceFlags)
    python: str = "python"
    #: (host folder, container folder) pairs mounted read-only (a project's folder).
    mounts: tuple[tuple[str, str], ...] = ()
    #: Variables added to the runner's (a project's ``PYTHONPATH``).
    env: Mapping[str, str] = field(default_factory=dict)
    #: The probe's audit step runs its bundled file here (envforge/probe/audit_step.py).
    audit_in_target: ClassVar[bool] = True

    @property
    def description(self) -> str:
        return f"docker image {self.image}"

    @contextmanager
    def start(
        self, worker_source: str, spec_json: str, env: Mapping[str, str]
    ) -> Iterator[ContainerHandle]:
        name = unique_name("probe")
        command = [self.python, f"{_PROBE_DIR}/{_PROBE_WORKER}", f"{_PROBE_DIR}/{_PROBE_SPEC}"]
        kwargs = container_kwargs(env={**env, **self.env}, flags=self.flags, role="probe")
        kwargs["name"] = name
        if self.mounts:  # Mount objects: a ':' in a folder's path cannot split them
            kwargs["mounts"] = [
                docker.types.Mount(dst, src, type="bind", read_only=True)
                for src, dst in self.mounts
            ]
        # a killed envforge (SIGKILL) leaves no probe container: a watcher removes it
        with bound(name):
            container: ContainerModel | None = None
            try:
                container = create_container(self.client, self.image, command, **kwargs)
                put_file(container, _PROBE_DIR, _PROBE_WORKER, worker_source.encode())
                put_file(container, _PROBE_DIR, _PROBE_SPEC, spec_json.encode())
                handle = ContainerHandle(self.client, container)
                try:
                    container.start()
                except docker.errors.APIError as exc:
                    raise Unavailable(
                        f"cannot start a probe container from {self.image[:19]}: "
                        f"{api_message(exc)}",
                        hint="check the device flags this host needs (envforge doctor)",
                    ) from None
                handle.begin()
                try:
                    yield handle
                finally:
                    handle.stop()
            finally:
                if container is not None:
                    remove_container(container)
                remove_by_name(self.client, name)
