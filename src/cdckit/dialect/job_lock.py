"""What the dialects' job locks share: a lock held by a database session of the job's own, shown alive at every
heartbeat (a server's idle-session timeout would end the session, and the lock with it) and, when that session was
lost, taken again on a new connection, or an error naming the session that has it now."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod


class SessionLock(ABC):
    """A job's lock held by a session of its own. ``what`` names it in messages ("slot orders_slot's job lock"),
    ``guards`` says what two holders would do ("reading the slot")."""

    what: str
    guards: str
    log: logging.Logger

    @abstractmethod
    def alive(self) -> bool:
        """Show the lock's session alive; False when it has no connection (it raises when the session was lost)."""

    @abstractmethod
    def take_again(self) -> str | None:
        """Take the lock on a new connection: None when held, else the session that has it ('' when unseen)."""

    @abstractmethod
    def close(self) -> None:
        """Close the lock's connection (which releases the lock)."""

    def keep(self) -> None:
        """Called every heartbeat: keep the lock's session alive, or take the lock again when it was lost."""
        try:
            if self.alive():
                return
        except Exception:
            self.close()
        try:
            holder = self.take_again()
        except Exception as exc:  # the server is unreachable: tried again at the next heartbeat
            self.log.warning("the connection holding the %s was lost and cannot be opened again now: %s", self.what,
                             str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            return
        if holder is None:
            self.log.warning("the connection holding the %s was lost; the lock is held again", self.what)
        else:
            self.log.error("the connection holding the %s was lost, and another session has the lock now%s: two jobs "
                           "may be %s", self.what, f" ({holder})" if holder else "", self.guards)
