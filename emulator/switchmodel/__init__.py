"""The switch model: the generated P4 program executed (``model.py``), serving P4Runtime
over gRPC (``server.py``); and the split reference semantics of the switch part, executed by
the IR interpreter (``reference.py``), which tests compare the split program with."""

from emulator.switchmodel.model import NfpTable, SwitchModel
from emulator.switchmodel.reference import SwitchReference

__all__ = ["NfpTable", "SwitchModel", "SwitchReference"]
