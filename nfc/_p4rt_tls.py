"""The P4Runtime endpoint's TLS flags, shared by ``nfc switch-model --p4runtime`` and
``nfc run --live``: ``--p4rt-cert FILE --p4rt-key FILE`` serve TLS, ``--p4rt-client-ca FILE``
makes it mutual (docs/runtime.md, "Who may talk to the switch")."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the switch model (gRPC) is imported by the command that serves, not to parse flags
    from emulator.switchmodel.server import ServerTls

__all__ = ["FlagError", "add_tls_flags", "security", "server_tls"]


class FlagError(Exception):
    """Flags that do not go together; the command prints the message and exits with 2."""


def add_tls_flags(parser: argparse.ArgumentParser, endpoint: str) -> None:
    """The three flags, for the endpoint ``endpoint`` names (the flag that serves it)."""
    parser.add_argument("--p4rt-cert", metavar="FILE", type=Path,
                        help=f"with {endpoint}: serve P4Runtime over TLS with this certificate chain (PEM)")
    parser.add_argument("--p4rt-key", metavar="FILE", type=Path, help="the private key of --p4rt-cert (PEM)")
    parser.add_argument("--p4rt-client-ca", metavar="FILE", type=Path,
                        help="mutual TLS: only clients with a certificate signed by this CA (PEM) may connect")


def server_tls(args: argparse.Namespace, serving: bool, endpoint: str) -> ServerTls | None:
    """The TLS the flags ask for (None: plaintext); ``serving``: whether the command serves
    the endpoint at all.  FlagError for a certificate without its key (or the reverse), a
    client CA without a certificate, or TLS flags without ``endpoint``."""
    cert, key, ca = args.p4rt_cert, args.p4rt_key, args.p4rt_client_ca
    if cert is None and key is None and ca is None:
        return None
    if not serving:
        raise FlagError(f"--p4rt-cert, --p4rt-key and --p4rt-client-ca secure the P4Runtime endpoint: "
                        f"they need {endpoint}")
    if cert is None and key is None:
        raise FlagError("--p4rt-client-ca needs --p4rt-cert and --p4rt-key (mutual TLS is TLS that also "
                        "checks the client)")
    if key is None:
        raise FlagError("--p4rt-cert needs --p4rt-key (its private key)")
    if cert is None:
        raise FlagError("--p4rt-key needs --p4rt-cert (the certificate it is the key of)")
    from emulator.switchmodel.server import ServerTls

    return ServerTls(cert, key, ca)


def security(tls: ServerTls | None) -> str:
    """How the endpoint is secured, for its announcement ("P4Runtime (mutual TLS) on ...")."""
    return "" if tls is None else " (TLS)" if tls.client_ca is None else " (mutual TLS)"
