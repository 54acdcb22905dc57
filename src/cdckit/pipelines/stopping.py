"""Clean stops: ``SIGTERM`` (how systemd, Kubernetes and YARN stop a process) and ``SIGINT`` (Ctrl-C).

While a job runs (``on_signals``), the first of either signal asks it to stop:

* during the stream's query, the query is stopped once the micro-batch under way is committed (or, after
  ``FINISH_BATCH_SECONDS``, in the middle of it: Structured Streaming runs an uncommitted batch again on the next
  start, with the same id and offsets), the last committed batch is acknowledged to the source, and the job ends;
* before the query (a snapshot, or the checks before the stream), the work under way is abandoned at once
  (``JobStopped`` is raised in the main thread and Spark's jobs are cancelled): an unfinished snapshot's state says
  so, and the next start takes the snapshot again.

A second signal ends the process at once, as the signal's default does.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType

log = logging.getLogger("cdckit")
SIGNALS = (signal.SIGTERM, signal.SIGINT)
FINISH_BATCH_SECONDS = 20.0  # within Kubernetes' default grace period (30 s) and systemd's (90 s)


class JobStopped(BaseException):
    """Raised in the main thread by a stop signal that came before the stream's query (a snapshot under way)."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


class StopRequest:
    """The process's stop request: the signal's name once one came, and whether it may interrupt the main thread
    (``interruptible``: no query is running whose loop would see ``event``)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signal_name: str | None = None
        self.interruptible = False
        self.cancel: Callable[[], None] | None = None  # cancels Spark's jobs

    def handle(self, number: int, frame: FrameType | None) -> None:
        if self.signal_name is not None:  # the second: at once, as the signal's default
            signal.signal(number, signal.SIG_DFL)
            os.kill(os.getpid(), number)
            return
        self.signal_name = signal.Signals(number).name
        self.event.set()
        if not self.interruptible:
            log.warning("%s: stopping once the micro-batch under way is committed (send it again to stop at once)",
                        self.signal_name)
            return
        log.warning("%s: abandoning the work under way (send it again to stop at once)", self.signal_name)
        if self.cancel is not None:  # not from here: Py4J may be in the middle of a call of this thread
            threading.Thread(target=self.cancel, daemon=True, name="cdckit-cancel-jobs").start()
        raise JobStopped(self.signal_name)


STOP = StopRequest()


@contextlib.contextmanager
def on_signals(cancel: Callable[[], None] | None = None) -> Iterator[StopRequest]:
    """Handle SIGTERM and SIGINT as stop requests while in the block (only in the main thread: elsewhere signals
    cannot be handled, and the block runs as before); the handlers before it are put back after it. ``cancel``:
    cancels the Spark jobs under way."""
    if threading.current_thread() is not threading.main_thread():
        yield STOP
        return
    before = {number: signal.getsignal(number) for number in SIGNALS}
    STOP.event.clear()
    STOP.signal_name, STOP.interruptible, STOP.cancel = None, True, cancel
    for number in SIGNALS:
        signal.signal(number, STOP.handle)
    try:
        yield STOP
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)
        STOP.event.clear()
        STOP.signal_name, STOP.interruptible, STOP.cancel = None, False, None
