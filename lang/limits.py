"""The implementation limits of the front end, in one place (docs/language.md lists them).

Each limit exists so that a malformed or hostile source gets a diagnostic instead of
exhausting memory, the Python stack or a 32-bit field of generated code.  Exceeding one
is reported at the offending text; the codes are in docs/errors.md.
"""

from __future__ import annotations

from lang.types import MAX_WIDTH

__all__ = [
    "MAX_DEPTH",
    "MAX_ENTRIES",
    "MAX_LITERAL_BITS",
    "MAX_PORT",
    "MAX_PROPERTY_NUMBER",
    "MAX_SOURCE_BYTES",
    "MAX_TIMEOUT_SECONDS",
]

# A source file (or an import) is read up to this many bytes (E002 beyond): 80 times the
# largest example, and parsed in seconds (Lark parses some 200 KB a second).
MAX_SOURCE_BYTES = 1024 * 1024
# Statements and operators nest at most this deep (E005): every later pass walks the tree
# recursively, and a chain ``a + b + ... + z`` nests as deep as it is long.
MAX_DEPTH = 64
# No integer literal has more bits than the widest bit<N> (E021): a value beyond any width
# is a typo, and a decimal of more digits would be slow (and refused) to convert.
MAX_LITERAL_BITS = MAX_WIDTH
# Table, register, counter and meter sizes (E090): generated code counts entries in 32 bits.
MAX_ENTRIES = 2**32 - 1
# Any other number in a property (E090): a float holds every integer up to here exactly.
MAX_PROPERTY_NUMBER = 2**53
# A state's idle timeout (E090): generated code keeps it as 64-bit nanoseconds.
MAX_TIMEOUT_SECONDS = 2**32
# Port numbers in port lists (E090): 16 bits, as ``std.ingress_port``.
MAX_PORT = 2**16 - 1
