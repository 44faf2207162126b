"""What differs between P4 architectures, behind one interface.

``targets.p4.lower`` builds the switch program from the placed IR without naming an
architecture; an ``Arch`` supplies intrinsic metadata names, drop / forward idioms,
hashing and checksum externs, and the package boilerplate.  TNA lives in
``targets/tofino/arch.py``, v1model in ``targets/bmv2/arch.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from targets.p4 import syntax as p

__all__ = ["Arch", "param"]


def param(direction: str, type_name: str, name: str) -> p.Param:
    """A parser or control parameter of a named type: ``param("inout", "headers_t", "hdr")``."""
    return p.Param(direction, p.TypeName(type_name), name)


class Arch(Protocol):
    name: str
    includes: tuple[str, ...]
    port_type: p.Type  # the P4 type of a port number
    port_width: int
    idle_property: str  # the table property that keeps per-entry idle time (TNA idle_timeout)

    def parser_params(self) -> tuple[p.Param, ...]: ...

    def parser_start(self) -> tuple[p.Stmt, ...]:
        """Statements the start state runs before selecting on the ingress port."""
        ...

    def ingress_port(self) -> p.Expr: ...

    def std_field(self, name: str) -> p.Expr | None:
        """``std.<name>`` as a P4 expression (None: not available on this architecture)."""
        ...

    def ingress_params(self) -> tuple[p.Param, ...]: ...

    def parser_error(self) -> p.Expr:
        """A bool: the parser stopped on an error (the packet was too short)."""
        ...

    def forward(self, port: p.Expr) -> tuple[p.Stmt, ...]: ...

    def drop(self) -> tuple[p.Stmt, ...]: ...

    def hash_instance(self, alg: str, width: int, name: str) -> p.Instance | None: ...

    def hash_stmt(self, alg: str, width: int, name: str, target: p.Expr, data: p.ListExpr) -> p.Stmt: ...

    def parser_checksum(self, inst: str, flag: p.Expr) -> tuple[tuple[p.Instance, ...], tuple[p.Stmt, ...]]:
        """Verify header ``inst``'s checksum in the parser state that extracts it.

        Returns extern instances for the parser and statements for that state; when the
        architecture cannot check in the parser it returns nothing and the ingress
        computes the flag (see ``needs_ingress_checksum``)."""
        ...

    needs_ingress_checksum: bool

    # whether ``csum_update`` chains into a header field are left to the ingress deparser's
    # checksum engine (TNA: in the ALUs their sums would span stages)
    deparser_checksum: bool

    def counter_instance(self, name: str, size: int) -> p.Instance: ...

    def count(self, name: str, index: p.Expr) -> p.Stmt: ...

    def user_counter_instance(self, name: str, size: int) -> p.Instance:
        """A ``counter c[size];`` of the program: packets and bytes per index."""
        ...

    def meter_instance(self, name: str, size: int) -> p.Instance: ...

    def meter_stmts(self, name: str, index: p.Expr, colour: p.Expr) -> tuple[p.Stmt, ...]:
        """Execute meter ``name`` and leave the colour in ``colour`` (bit<8>): 0 green, 1 yellow, 2 red."""
        ...

    def register_instance(self, name: str, width: int, size: int) -> p.Instance:
        """``register name: bit<width>[size]``, every cell 0."""
        ...

    def register_access(self, name: str, width: int, index: p.Expr, old: p.Expr,
                        update: Callable[[p.Expr], tuple[p.Expr | None, p.Expr | None]]
                        ) -> tuple[tuple[p.Instance, ...], tuple[p.Stmt, ...]]:
        """One read-modify-write of register ``name`` at ``index`` (bit<32>): ``old`` gets the
        cell's value before, and the cell becomes ``new`` where ``guard`` holds (None: always;
        ``new`` None: no write), where ``update(value)`` gives ``(guard, new)`` with the old
        value spelled ``value``.  Returns the instances it needs and the statements."""
        ...

    def rest(self, hdr_type: str, meta_type: str, emit: tuple[p.Stmt, ...],
             csum_updates: tuple[tuple[str, tuple[p.Expr, ...], p.Expr], ...],
             parser: str, ingress: str,
             deferred: tuple[tuple[str, p.Expr, tuple[p.Expr, ...], p.Expr, bool], ...] = ()) -> tuple[p.Decl, ...]:
        """Deparser, egress and the package instantiation.  ``deferred``: (engine, flag, words,
        target, zeros as ones) of the checksums the ingress deparser computes where the flag
        is set (only with ``deparser_checksum``)."""
        ...
