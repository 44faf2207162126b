"""A software model of the switch part: executes the placed IR with the reference
interpreter and serves P4Runtime over gRPC (``server.py``)."""

from targets.switchmodel.model import SwitchModel

__all__ = ["SwitchModel"]
