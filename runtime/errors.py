"""The runtime API's typed errors.  A call that raises one changed nothing, on the switch or
on the server (the API undoes what one side did when the other refused)."""

from __future__ import annotations

__all__ = ["ChannelError", "EntryExists", "EntryNotFound", "InvalidEntry", "RuntimeApiError", "TableFull"]


class RuntimeApiError(Exception):
    """Base class; ``index`` is the entry at fault in a bulk call (or -1)."""

    def __init__(self, message: str, index: int = -1) -> None:
        super().__init__(message)
        self.index = index


class InvalidEntry(RuntimeApiError, ValueError):
    """A missing, unknown or out-of-range field; a key given twice; an unknown table."""


class EntryExists(RuntimeApiError):
    """add() of a key that is already present."""


class EntryNotFound(RuntimeApiError):
    """modify()/delete()/read() of a key that is not present."""


class TableFull(RuntimeApiError):
    """The switch or the server has no room for the entry."""


class ChannelError(RuntimeApiError):
    """The switch's P4Runtime endpoint or the server's control channel failed or refused the
    request as malformed (a protocol mismatch, a dead process)."""
