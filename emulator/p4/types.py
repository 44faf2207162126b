"""Names and types a P4 program sees: its own declarations plus its architecture's.

The executor types every expression before it runs (P4_16 is statically typed: every
``bit<W>`` operation wraps at W bits), so run-time values are plain ints.
"""

from __future__ import annotations

from dataclasses import dataclass

from targets.p4 import intrinsics
from targets.p4 import syntax as p

__all__ = ["INT", "TypeEnv", "TypeErrorP4"]

INT = p.Bits(-1)  # the type of an untyped integer literal: takes its width from context


class TypeErrorP4(Exception):
    """The program is not well-typed P4 for the subset the executor runs (a generator bug)."""


@dataclass(frozen=True, slots=True)
class _Const:
    type: p.Type
    value: int


class TypeEnv:
    def __init__(self, prog: p.Program) -> None:
        self.arch = intrinsics.arch_of(prog)
        self.typedefs: dict[str, p.Type] = dict(intrinsics.typedefs(self.arch))
        self.typedefs.update({d.name: d.type for d in prog.decls if isinstance(d, p.Typedef)})
        raw: dict[str, p.HeaderType | p.Struct] = dict(intrinsics.types(self.arch))
        raw.update({d.name: d for d in prog.decls if isinstance(d, p.HeaderType | p.Struct)})
        self.decls = {name: self._resolved_decl(d) for name, d in raw.items()}
        self.enums = dict(intrinsics.enum_members(self.arch))
        self.enum_types = {key.split(".")[0] for key in self.enums}
        self.consts: dict[str, _Const] = {name: _Const(INT, v) for name, v in intrinsics.constants(self.arch).items()}
        for d in prog.decls:
            if isinstance(d, p.ConstDecl):
                if not isinstance(d.value, p.Const):
                    raise TypeErrorP4(f"constant {d.name} must be a literal")
                self.consts[d.name] = _Const(self.resolve(d.type), d.value.value)

    def resolve(self, t: p.Type) -> p.Type:
        seen = 0
        while isinstance(t, p.TypeName) and t.name in self.typedefs and not t.args:
            t = self.typedefs[t.name]
            seen += 1
            if seen > 16:
                raise TypeErrorP4(f"typedef cycle at {t}")
        return t

    def _resolved_decl(self, d: p.HeaderType | p.Struct) -> p.HeaderType | p.Struct:
        fields = tuple((n, self.resolve(t)) for n, t in d.fields)
        if isinstance(d, p.HeaderType):
            return p.HeaderType(d.name, fields, d.comment, d.annotations)
        return p.Struct(d.name, fields, d.comment)

    def decl(self, t: p.Type) -> p.HeaderType | p.Struct:
        t = self.resolve(t)
        if not isinstance(t, p.TypeName) or t.name not in self.decls:
            raise TypeErrorP4(f"{t} must be a header or struct type")
        return self.decls[t.name]

    def field_type(self, t: p.Type, name: str) -> p.Type:
        d = self.decl(t)
        for fname, ft in d.fields:
            if fname == name:
                return ft
        raise TypeErrorP4(f"{d.name} has no field {name}")

    def width(self, t: p.Type) -> int:
        t = self.resolve(t)
        if isinstance(t, p.Bits):
            return t.width
        if isinstance(t, p.Bool):
            return 1
        raise TypeErrorP4(f"{t} has no bit width")
