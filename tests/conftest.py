"""Shared by every test run: the signals tests send must reach the processes they start.

A CI runner may start the test run as a background job of a non-interactive shell, which
starts it with SIGINT ignored; an ignored signal stays ignored across fork and exec, so
every ``envforge`` a test starts would ignore Ctrl-C and each Ctrl-C test would fail (or
pass for the wrong reason). A user's envforge gets SIGINT with its default action: the
test run takes SIGINT back (Python's own handler), at start and again before each test
(should anything in between have set it to "ignore"), so that the children it starts
begin with the default action (a handled signal is reset to the default at exec).

And the ``needs_torch`` marker's gate (tests/helpers/torch_gate.py).
"""

from __future__ import annotations

import os
import signal

import pytest

# The helpers that assert (the backend contract) report their asserts as tests do.
pytest.register_assert_rewrite("tests.helpers.backend_contract")

from tests.helpers import torch_gate  # noqa: E402 - after the rewrite registration


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``needs_torch`` tests are skipped, naming torch, where it is missing (never where it
    is there); ``ENVFORGE_REQUIRE_TORCH=1`` makes that an error (tests/helpers/torch_gate.py).
    """
    torch_gate.gate(items, torch_here=torch_gate.has_torch(), environ=os.environ)


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
