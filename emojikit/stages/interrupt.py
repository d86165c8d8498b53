"""Graceful stops: SIGINT/SIGTERM set a flag; loops finish the current step, checkpoint, exit.

A second signal stops at once (the default handler), for a user who really means it.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator


class StopFlag:
    def __init__(self) -> None:
        self.signal_name: str | None = None

    def __bool__(self) -> bool:
        return self.signal_name is not None


@contextlib.contextmanager
def graceful_stop() -> Iterator[StopFlag]:
    flag = StopFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag  # signals are only delivered to the main thread
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def handle(signum, frame):
        flag.signal_name = signal.Signals(signum).name
        print(f"\n{flag.signal_name}: finishing the current step, then saving and exiting (send again to stop now)", flush=True)
        signal.signal(signum, previous[signum] if previous[signum] not in (None, signal.SIG_IGN) else signal.SIG_DFL)

    for sig in previous:
        signal.signal(sig, handle)
    try:
        yield flag
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class Interrupted(SystemExit):
    """Raised after a graceful stop has saved state; exit status 130 like a shell's SIGINT."""

    def __init__(self, message: str):
        print(message, flush=True)
        super().__init__(130)
