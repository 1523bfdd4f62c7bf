"""The signal dispositions the agent passes on to the programs it starts."""

from __future__ import annotations

import signal
from types import FrameType


def _ignore(signum: int, frame: FrameType | None) -> None:
    del signum, frame


def handle_ignored() -> None:
    """Keep ignoring what whoever started the agent ignored, without passing it on.

    An ignored signal stays ignored across exec, so every job would inherit it: under
    `nohup` an interactive session would outlive its hang-up (SIGHUP), and from a shell's
    background job a command could not be interrupted (SIGINT, SIGQUIT). A handled signal
    is reset to its default in a new program, so the agent handles these by doing nothing.
    """
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT):
        if signal.getsignal(sig) is signal.SIG_IGN:
            signal.signal(sig, _ignore)
