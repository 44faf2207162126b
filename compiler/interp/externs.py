"""Semantics of the named operations declared in ``stdlib/ops.nfp``.

Each function receives the packet context, its evaluated arguments (integers, or the
instance name for header-typed parameters) and returns the call's value (0 when none).
A program that declares an extern with no implementation here gets an internal error.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from typing import TYPE_CHECKING

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

if TYPE_CHECKING:
    from compiler.interp.exec import Ctx

__all__ = ["EXTERNS"]

ESP_IV = 8
ESP_ICV = 16
IP_ESP = 50
NEXT_HEADER = {4: 4, 6: 41}  # IP version of the inner packet -> ESP next header
CBC_IV, CBC_BLOCK, SHA1_ICV = 16, 16, 12  # RFC 3602, RFC 2404


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
    iv = seq.to_bytes(ESP_IV, "big")
    aead, nonce = _gcm(key, salt, iv)
    ctx.payload = iv + aead.encrypt(nonce, _plaintext(ctx.take_after(esp), 4), _aad(spi, seq, esn))
    _fill(ctx, outer, esp, spi, seq, src, dst)
    return 0


def _plaintext(inner: bytes, align: int) -> bytes:
    """RFC 4303 §2.4-2.6: the inner packet, the default padding 1, 2, ... to ``align`` bytes with
    the pad length and next header, which says what the inner packet is (59: none)."""
    padlen = -(len(inner) + 2) % align
    nh = NEXT_HEADER.get(inner[0] >> 4, 4) if inner else 59
    return inner + bytes(range(1, padlen + 1)) + bytes([padlen, nh])


def _unpad(plaintext: bytes) -> bytes | None:
    """The inner packet of a plaintext whose trailer and default padding are well formed."""
    padlen = plaintext[-2] if len(plaintext) >= 2 else 255
    if padlen + 2 > len(plaintext) or plaintext[-2 - padlen : -2] != bytes(range(1, padlen + 1)):
        return None
    return plaintext[: -2 - padlen]


def _fill(ctx: Ctx, outer: str, esp: str, spi: int, seq: int, src: int, dst: int) -> None:
    ctx.headers[esp] = {"spi": spi, "seq": seq & 0xFFFFFFFF}
    ctx.headers[outer] = {"version": 4, "ihl": 5, "total_len": 20 + 8 + len(ctx.payload), "ttl": 64,
                          "protocol": IP_ESP, "src": src, "dst": dst}


def _cbc_keys(key: int, auth_hi: int, auth_lo: int) -> tuple[bytes, bytes]:
    return key.to_bytes(16, "big"), auth_hi.to_bytes(4, "big") + auth_lo.to_bytes(16, "big")


def esp_encrypt_cbc(ctx: Ctx, args: list[int | str]) -> int:
    """AES-CBC-128 + HMAC-SHA1-96 (stdlib/ops.nfp): IV = AES_key(spi . 0^32 . seq^64)."""
    outer, esp = str(args[0]), str(args[1])
    spi, seq, key, auth_hi, auth_lo, src, dst = (int(a) for a in args[2:])
    cipher_key, auth_key = _cbc_keys(key, auth_hi, auth_lo)
    nonce = spi.to_bytes(4, "big") + bytes(4) + seq.to_bytes(8, "big")
    iv = Cipher(algorithms.AES(cipher_key), modes.ECB()).encryptor().update(nonce)
    ct = Cipher(algorithms.AES(cipher_key), modes.CBC(iv)).encryptor().update(
        _plaintext(ctx.take_after(esp), CBC_BLOCK))
    header = spi.to_bytes(4, "big") + (seq & 0xFFFFFFFF).to_bytes(4, "big")
    icv = hmac.new(auth_key, header + iv + ct, hashlib.sha1).digest()[:SHA1_ICV]
    ctx.payload = iv + ct + icv
    _fill(ctx, outer, esp, spi, seq, src, dst)
    return 0


def esp_decrypt_cbc(ctx: Ctx, args: list[int | str]) -> int:
    outer, esp = str(args[0]), str(args[1])
    cipher_key, auth_key = _cbc_keys(int(args[2]), int(args[3]), int(args[4]))
    hdr, data = ctx.headers.get(esp), ctx.payload
    n = len(data) - CBC_IV - SHA1_ICV
    if hdr is None or n < CBC_BLOCK or n % CBC_BLOCK:
        return 0
    header = hdr["spi"].to_bytes(4, "big") + hdr["seq"].to_bytes(4, "big")
    icv = hmac.new(auth_key, header + data[:-SHA1_ICV], hashlib.sha1).digest()[:SHA1_ICV]
    if not hmac.compare_digest(icv, data[-SHA1_ICV:]):
        return 0
    return _opened(ctx, outer, esp, _unpad(Cipher(algorithms.AES(cipher_key), modes.CBC(data[:CBC_IV])).decryptor()
                                           .update(data[CBC_IV:-SHA1_ICV])))


def _opened(ctx: Ctx, outer: str, esp: str, inner: bytes | None) -> int:
    """A decryption's end: with an inner packet (the trailer well formed) it is the payload and
    ``outer`` and ``esp`` are invalid (1); without, nothing changes (0)."""
    if inner is None:
        return 0
    ctx.headers[outer] = None
    ctx.headers[esp] = None
    ctx.payload = inner
    return 1


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
        return _opened(ctx, outer, esp, _unpad(aead.decrypt(nonce, data[ESP_IV:], aad)))
    except InvalidTag:
        return 0


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
    "esp_encrypt_cbc": esp_encrypt_cbc,
    "esp_decrypt_cbc": esp_decrypt_cbc,
    "esn_high": esn_high,
    "replay_check_esn": replay_check,
    "alloc_port": alloc_port,
}
