"""Semantics of the named operations declared in ``stdlib/ops.nfp``.

Each function receives the packet context, its evaluated arguments (integers, or the
instance name for header-typed parameters) and returns the call's value (0 when none).
A program that declares an extern with no implementation here gets an internal error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

if TYPE_CHECKING:
    from compiler.interp.exec import Ctx

__all__ = ["EXTERNS"]

ESP_IV = 8
ESP_ICV = 16
IP_ESP = 50
NEXT_HEADER = {4: 4, 6: 41}  # IP version of the inner packet -> ESP next header


def _gcm(key: int, salt: int, iv: bytes) -> tuple[AESGCM, bytes]:
    return AESGCM(key.to_bytes(16, "big")), salt.to_bytes(4, "big") + iv


def _aad(spi: int, seq: int, esn: bool) -> bytes:
    """RFC 4106 §5: SPI and the 32-bit sequence number, or SPI and the 64-bit one (high first)."""
    return spi.to_bytes(4, "big") + seq.to_bytes(8 if esn else 4, "big")


def esp_encrypt(ctx: Ctx, args: list[int | str]) -> int:
    return _seal(ctx, args, esn=False)


def esp_encrypt_esn(ctx: Ctx, args: list[int | str]) -> int:
    return _seal(ctx, args, esn=True)


def _seal(ctx: Ctx, args: list[int | str], esn: bool) -> int:
    outer, esp = str(args[0]), str(args[1])
    spi, seq, key, salt, src, dst = (int(a) for a in args[2:])
    inner = ctx.take_after(esp)
    padlen = -(len(inner) + 2) % 4
    nh = NEXT_HEADER.get(inner[0] >> 4, 4) if inner else 59
    plaintext = inner + bytes(range(1, padlen + 1)) + bytes([padlen, nh])
    iv = seq.to_bytes(ESP_IV, "big")
    aead, nonce = _gcm(key, salt, iv)
    ctx.payload = iv + aead.encrypt(nonce, plaintext, _aad(spi, seq, esn))
    ctx.headers[esp] = {"spi": spi, "seq": seq & 0xFFFFFFFF}
    total = 20 + 8 + len(ctx.payload)
    ctx.headers[outer] = {"version": 4, "ihl": 5, "total_len": total, "ttl": 64, "protocol": IP_ESP,
                          "src": src, "dst": dst}
    return 0


def esp_decrypt(ctx: Ctx, args: list[int | str]) -> int:
    return _open(ctx, args, None)


def esp_decrypt_esn(ctx: Ctx, args: list[int | str]) -> int:
    return _open(ctx, args, int(args[4]))


def _open(ctx: Ctx, args: list[int | str], seq_high: int | None) -> int:
    """``seq_high``: the high 32 bits of an ESN SA's sequence number (None: not ESN)."""
    outer, esp = str(args[0]), str(args[1])
    key, salt = int(args[2]), int(args[3])
    hdr = ctx.headers.get(esp)
    data = ctx.payload
    if hdr is None or len(data) < ESP_IV + ESP_ICV + 2:
        return 0
    iv = data[:ESP_IV]
    aead, nonce = _gcm(key, salt, iv)
    esn = seq_high is not None
    aad = _aad(hdr["spi"], ((seq_high or 0) << 32) | hdr["seq"], esn)
    try:
        plaintext = aead.decrypt(nonce, data[ESP_IV:], aad)
    except InvalidTag:
        return 0
    padlen = plaintext[-2]
    if padlen + 2 > len(plaintext) or plaintext[-2 - padlen : -2] != bytes(range(1, padlen + 1)):
        return 0
    ctx.headers[outer] = None
    ctx.headers[esp] = None
    ctx.payload = plaintext[: -2 - padlen]
    return 1


def replay_check(ctx: Ctx, args: list[int | str]) -> int:
    """replay_check and replay_check_esn: one window per SA, over 64-bit numbers."""
    return int(ctx.state.replay_check(int(args[0]), int(args[1])))


def esn_high(ctx: Ctx, args: list[int | str]) -> int:
    return ctx.state.esn_high(int(args[0]), int(args[1]))


def alloc_port(ctx: Ctx, args: list[int | str]) -> int:
    return ctx.state.alloc_port(int(args[0]), ctx.now)


EXTERNS: dict[str, Callable[[Ctx, list[int | str]], int]] = {
    "esp_encrypt": esp_encrypt,
    "esp_decrypt": esp_decrypt,
    "replay_check": replay_check,
    "esp_encrypt_esn": esp_encrypt_esn,
    "esp_decrypt_esn": esp_decrypt_esn,
    "esn_high": esn_high,
    "replay_check_esn": replay_check,
    "alloc_port": alloc_port,
}
