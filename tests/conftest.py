"""What every test run needs, unit and integration alike."""

from __future__ import annotations

import signal

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # A shell starts a background job with SIGINT ignored, and an ignored signal
    # stays ignored across exec: the tests that press Ctrl-C in a child pybox
    # would then find it deaf. Python's own handler is not inherited, so the
    # children start with the default a terminal gives them.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
