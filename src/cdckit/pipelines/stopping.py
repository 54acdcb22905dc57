"""Clean stops: ``SIGTERM`` (how systemd, Kubernetes and YARN stop a process) and ``SIGINT`` (Ctrl-C).

While a job runs (``on_signals``), the first of either signal asks it to stop:

* during the stream's query, the query is stopped once the micro-batch under way is committed (or, after
  ``FINISH_BATCH_SECONDS``, in the middle of it: Structured Streaming runs an uncommitted batch again on the next
  start, with the same id and offsets), the last committed batch is acknowledged to the source, and the job ends;
* before the query (a snapshot, or the checks before the stream), the work under way is abandoned: Spark's jobs are
  cancelled, so the action the main thread waits for fails, and outside a Spark action ``JobStopped`` is raised in
  the main thread (never inside a Py4J call: its connection would be left waiting for the answer of the call it
  abandoned). The job then ends as stopped (``on_signals``' ``signal_name``); an unfinished snapshot's state says
  so, and the next start takes the snapshot again.

A second signal ends the process at once, as the signal's default does.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType

log = logging.getLogger("cdckit")
SIGNALS = (signal.SIGTERM, signal.SIGINT)
FINISH_BATCH_SECONDS = 20.0
CANCEL_EVERY_SECONDS = 0.5  # within Kubernetes' default grace period (30 s) and systemd's (90 s)


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
            threading.Thread(target=self._cancelling, args=(self.cancel,), daemon=True,
                             name="cdckit-cancel-jobs").start()
        if not in_py4j(frame):  # inside a Spark action, its cancelled jobs end it
            raise JobStopped(self.signal_name)


    def _cancelling(self, cancel: Callable[[], None]) -> None:
        """Cancel Spark's jobs, and those started after, until the job has ended (or its stream's query runs)."""
        while self.interruptible and self.cancel is cancel:
            try:
                cancel()
            except Exception as exc:  # Spark is ending
                log.debug("cancelling Spark's jobs: %s", exc)
                return
            time.sleep(CANCEL_EVERY_SECONDS)


def in_py4j(frame: FrameType | None) -> bool:
    """Whether the interrupted code is inside a Py4J call (a Spark action waiting for its answer)."""
    while frame is not None:
        if "/py4j/" in frame.f_code.co_filename.replace("\\", "/"):
            return True
        frame = frame.f_back
    return False


STOP = StopRequest()


@contextlib.contextmanager
def on_signals(cancel: Callable[[], None] | None = None) -> Iterator[StopRequest]:
    """Handle SIGTERM and SIGINT as stop requests while in the block (only in the main thread: elsewhere signals
    cannot be handled, and the block runs as before); the handlers before it are put back after it. ``cancel``:
    cancels the Spark jobs under way."""
    if threading.current_thread() is not threading.main_thread():
        yield StopRequest()  # never signalled: only the main thread handles signals
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
