"""A P4_16 executor for the subset nfc's switch generators print (TNA and v1model)."""

from emulator.p4.executor import P4Executor, P4Result
from emulator.p4.tables import Match, P4Table, TableEntry, TableError

__all__ = ["Match", "P4Executor", "P4Result", "P4Table", "TableEntry", "TableError"]
