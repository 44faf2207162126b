"""How the switch model's P4Runtime server says no (P4Runtime v1.4 §10, §12.3): a refused
request or update as :class:`Reject` with its ``google.rpc`` code, the P4 table's typed
errors mapped to those codes, and a batch's per-update errors in the status details."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from google.rpc import code_pb2, status_pb2
from p4.v1 import p4runtime_pb2

from emulator.p4.tables import DuplicateEntry, MissingEntry, TableError, TableFull

__all__ = ["Reject", "abort", "abort_with_details", "invalid", "table_op"]

_GRPC_CODE = {c.value[0]: c for c in grpc.StatusCode}


class Reject(Exception):
    """A request (or one update of a batch) refused with a ``google.rpc`` code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def invalid(message: str) -> Reject:
    """The most common refusal: INVALID_ARGUMENT."""
    return Reject(code_pb2.INVALID_ARGUMENT, message)


def abort(context: Any, r: Reject) -> None:
    """End the RPC with ``r``'s code and message."""
    context.abort(_GRPC_CODE[r.code], r.message)


def table_op(op: Callable[[], object]) -> None:
    """Run a P4Table write; its typed errors become the codes of §12."""
    try:
        op()
    except DuplicateEntry as e:
        raise Reject(code_pb2.ALREADY_EXISTS, str(e)) from e
    except MissingEntry as e:
        raise Reject(code_pb2.NOT_FOUND, str(e)) from e
    except TableFull as e:
        raise Reject(code_pb2.RESOURCE_EXHAUSTED, str(e)) from e
    except TableError as e:
        raise invalid(str(e)) from e


def abort_with_details(context: Any, results: list[tuple[int, str]], message: str) -> None:
    """§10: status UNKNOWN, and a ``google.rpc.Status`` with one ``p4.v1.Error`` per element
    of the batch, in order, in the ``grpc-status-details-bin`` trailer."""
    status = status_pb2.Status(code=code_pb2.UNKNOWN, message=message)
    for code, text in results:
        status.details.add().Pack(p4runtime_pb2.Error(canonical_code=code, message=text))
    context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
    context.abort(grpc.StatusCode.UNKNOWN, message)
