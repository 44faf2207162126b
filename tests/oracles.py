"""Reference implementations the tests compare against, written from the standards, not
from nfc's code (each checked against its standard's published check value)."""

from __future__ import annotations


def crc16_arc(data: bytes) -> int:
    """CRC-16/ARC: reflected polynomial 0x8005 (0xA001), init 0, no final xor; check value
    for b"123456789" is 0xBB3D (the CRC catalogue)."""
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
    return crc


def ip2int(a: str) -> int:
    return int.from_bytes(bytes(int(x) for x in a.split(".")), "big")


def mac2int(m: str) -> int:
    return int(m.replace(":", ""), 16)
