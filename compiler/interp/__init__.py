"""The reference interpreter: the executable semantics of the typed IR."""

from compiler.interp.exec import Ctx, Interpreter, Outcome, Stop, crc16
from compiler.interp.state import DataplaneState, MeterConfig
from compiler.interp.tables import Entry, Match, TableContents, TableError

__all__ = [
    "Ctx",
    "DataplaneState",
    "Entry",
    "Interpreter",
    "Match",
    "MeterConfig",
    "Outcome",
    "Stop",
    "TableContents",
    "TableError",
    "crc16",
]
