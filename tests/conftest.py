"""Shared by every test run: the signals tests send must reach the processes they start.

A CI runner may start the test run as a background job of a non-interactive shell, which
starts it with SIGINT ignored; an ignored signal stays ignored across fork and exec, so
every ``envforge`` a test starts would ignore Ctrl-C and each Ctrl-C test would fail (or
pass for the wrong reason). A user's envforge gets SIGINT with its default action: the
test run takes SIGINT back (Python's own handler), at start and again before each test
(should anything in between have set it to "ignore"), so that the children it starts
begin with the default action (a handled signal is reset to the default at exec).
"""

from __future__ import annotations

import signal

import pytest

# The helpers that assert (the backend contract) report their asserts as tests do.
pytest.register_assert_rewrite("tests.helpers.backend_contract")


def _take_sigint_back() -> None:
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # a background job starts with SIGQUIT ignored too; the tests that forward it need it back
    if signal.getsignal(signal.SIGQUIT) == signal.SIG_IGN:
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)


_take_sigint_back()


@pytest.fixture(autouse=True)
def _sigint_reaches_children() -> None:
    _take_sigint_back()
