"""Helpers of the tests of the P4Runtime endpoint's transport (P4Runtime §3.1.1), shared by
tests/test_p4runtime_conformance.py and tests/test_switch_model_cli.py: test certificates,
and which addresses a TCP port listens on (read from the kernel, not from the server)."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path
from typing import Any

__all__ = ["listening", "make_pki"]


def listening(port: int) -> set[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The local addresses of the TCP sockets listening on ``port`` (Linux /proc/net; an IPv4
    address mapped into IPv6 as itself)."""
    found = set()
    for table, size in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, hexport = local.split(":")
            if state == "0A" and int(hexport, 16) == port:  # 0A: LISTEN
                raw = bytes.fromhex(addr)
                words = b"".join(raw[i:i + 4][::-1] for i in range(0, size, 4))  # host-order 32-bit words
                ip = ipaddress.ip_address(words)
                found.add(getattr(ip, "ipv4_mapped", None) or ip)
    return found


def make_pki(folder: Path) -> Path:
    """Two CAs; the switch's certificate (for 127.0.0.1) and a client's from CA 1; another
    client's from CA 2.  PEM files ``<name>.crt`` / ``<name>.key`` in ``folder`` (needs the
    ``cryptography`` package: callers skip without it)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def make(name: str, issuer: tuple[Any, Any] | None, ca: bool = False, ip: str | None = None) -> tuple[Any, Any]:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        builder = (x509.CertificateBuilder().subject_name(subject)
                   .issuer_name(issuer[0].subject if issuer else subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if ip is not None:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))]), critical=False)
        cert = builder.sign(issuer[1] if issuer else key, hashes.SHA256())
        (folder / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (folder / f"{name}.key").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                               serialization.PrivateFormat.PKCS8,
                                                               serialization.NoEncryption()))
        return cert, key

    ca1, ca2 = make("ca1", None, ca=True), make("ca2", None, ca=True)
    make("switch", ca1, ip="127.0.0.1")
    make("client", ca1)
    make("stranger", ca2)
    return folder
