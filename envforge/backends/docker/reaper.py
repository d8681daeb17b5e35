"""``python -m envforge.backends.docker.reaper NAME``: the watcher that binds container
NAME's lifetime to the envforge that started it (see :func:`.leftovers.bound`).

Its stdin is a pipe only that envforge writes. EOF after ``done``: envforge removed the
container itself, nothing to do. EOF without it: envforge ended without cleaning up
(SIGKILL), so the container is removed here. The watcher runs in a session of its own and
ignores SIGINT and SIGHUP (a terminal closing or a Ctrl-C for envforge's group never ends
it before its work is done). It imports the Docker SDK only when there is work.
"""

from __future__ import annotations

import signal
import sys

from envforge.errors import EnvforgeError


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if len(argv) != 2:
        return 2
    if sys.stdin.buffer.read(64).startswith(b"done"):  # blocks until EOF
        return 0
    from envforge.backends.docker.containers import remove_by_name  # noqa: PLC0415 - SDK on work only
    from envforge.backends.docker.engine import connect  # noqa: PLC0415 - as above

    try:
        client = connect()
    except EnvforgeError:
        return 1
    try:
        remove_by_name(client, argv[1])
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
