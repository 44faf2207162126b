"""P4Runtime over gRPC for the switch model, to the P4Runtime specification v1.4: §5 client
arbitration, §8.4 bytestrings, §9.1 table entries, §10 error reporting, §12 Write and its batch
atomicity, §13 Read, §14/§15 the pipeline config, §16 packet I/O; §3.1.1 transport security
(TLS, mutual TLS).

Any P4Runtime client can drive it as it would drive a real switch: it loads the P4Info of
the generated program (``SetForwardingPipelineConfig``), writes table entries, reads
entries and the drop counter, and receives punted packets as ``PacketIn`` on the primary
client's stream.  Entities are translated through the name map to the model's tables, and
every rule the specification puts on a request is checked before anything changes: a
request the specification refuses is refused with its status code, never stored.

The device starts with its program loaded (it *is* the program), so ``Write`` and ``Read``
work before any ``SetForwardingPipelineConfig``; the only role is the default role.

This module puts the service on a gRPC port (:func:`serve`, :class:`ServerTls`); the service
is built from private parts: ``_p4rt_service`` (the RPCs), ``_p4rt_entries`` (entries and
their checks), ``_p4rt_arbiter`` (arbitration), ``_p4rt_status`` (error reporting).
"""

from __future__ import annotations

import ssl
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from p4.v1 import p4runtime_pb2_grpc

from emulator.switchmodel._p4rt_service import P4RuntimeServer

__all__ = ["P4RuntimeServer", "ServeError", "ServerTls", "serve"]


# ---- transport (§3.1.1) --------------------------------------------------------------------------

class ServeError(RuntimeError):
    """The endpoint cannot be served: its address cannot be bound, or a TLS file is unusable."""


@dataclass(frozen=True)
class ServerTls:
    """TLS for the P4Runtime endpoint: the switch's certificate chain and key (PEM files);
    with ``client_ca``, mutual TLS: a client must present a certificate signed by that CA."""

    cert: Path
    key: Path
    client_ca: Path | None = None

    def credentials(self) -> grpc.ServerCredentials:
        """The gRPC credentials, once the files are known to be a certificate with its key
        and a CA (gRPC itself would only say that it failed to bind)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            ctx.load_cert_chain(self.cert, self.key)
            if self.client_ca is not None:
                ctx.load_verify_locations(cafile=self.client_ca)
        except (ssl.SSLError, OSError) as e:
            raise ServeError(f"TLS files {self.cert}, {self.key}{f', {self.client_ca}' if self.client_ca else ''}: "
                             f"not a PEM certificate with its private key{' and a CA' if self.client_ca else ''} "
                             f"({e.strerror or e})") from e
        return grpc.ssl_server_credentials(
            [(self.key.read_bytes(), self.cert.read_bytes())],
            root_certificates=self.client_ca.read_bytes() if self.client_ca is not None else None,
            require_client_auth=self.client_ca is not None)


def serve(server: P4RuntimeServer, address: str = "127.0.0.1:0", tls: ServerTls | None = None,
          local: Path | None = None) -> tuple[Any, int]:
    """Start a gRPC server on ``address`` — loopback unless told otherwise, so only this
    machine can drive the switch; with ``tls``, TLS or mutual TLS.  ``local``: also serve
    plaintext on this unix socket, for a controller of this process that holds no client
    certificate (``nfc run``'s own runtime); its folder must be one only the caller can
    enter.  The port is this server's alone (no SO_REUSEPORT: a port in use is an error, not
    shared with another process).  Returns the server and its bound port."""
    creds = tls.credentials() if tls is not None else None
    grpc_server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=[("grpc.so_reuseport", 0)])
    p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(server, grpc_server)
    try:
        port = (grpc_server.add_secure_port(address, creds) if creds is not None
                else grpc_server.add_insecure_port(address))
        if local is not None:
            grpc_server.add_insecure_port(f"unix:{local}")
    except RuntimeError as e:
        raise ServeError(f"cannot serve P4Runtime on {address}{f' and {local}' if local else ''}: "
                         "the address is in use or not one of this machine") from e
    grpc_server.start()
    return grpc_server, port
