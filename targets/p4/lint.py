"""A lint over the P4 syntax tree (``targets.p4.syntax``) for what real P4 compilers reject.

p4c is not available where nfc is built and tested, so the generators' output is checked
here against the rules p4test, p4c-bm2-ss and the architecture headers enforce (p4c
1.2.5.16), for the subset of P4_16 the generators emit:

=======  =================================================================================
code     check
=======  =================================================================================
P4L001   a name declared twice in one scope (top level, including the architecture's
         declarations; parser parameters, locals and states; control parameters and
         locals; action parameters; struct and header fields)            p4test
P4L002   the architecture named by the caller is not the one the preamble includes
P4L010   a table applied at more than one place in a control             p4c-bm2-ss
P4L020   a shift amount typed wider than 8 bits (``x >> 32w16``): an error on v1model
         (p4c-bm2-ss rejects it), a warning on TNA / T2NA: p4test accepts it, but nfc
         prints one lowering for both architectures, so the v1model twin would fail
P4L021   a shift whose left operand is an untyped integer (error), or a constant amount
         not below the operand's width (warning, p4c ``--Wwarn=overflow``)
P4L030   an unknown name or type, or one used before its declaration     p4test
P4L031   an unknown field, member or method                              p4test
P4L040   operands of an arithmetic, bitwise or comparison operator of different widths
         or types                                                        p4test
P4L041   the two sides of ``=`` of different types                       p4test
P4L042   a condition or an operand of ``&&`` / ``||`` / ``!`` that is not bool
P4L043   an integer literal that does not fit its width
P4L044   a slice outside its base's width
P4L045   a cast other than bit<N> ↔ bit<M>, bit<1> ↔ bool, integer → bit<N>
P4L046   a call with the wrong number of (type) arguments
P4L047   a call argument of the wrong type
P4L048   an ``out`` / ``inout`` argument, assignment target or ``setValid`` that is not a
         writable l-value (``in`` parameter, constant)
P4L049   a select keyset whose type differs from the select expression's; an unknown
         next state
P4L050   a field of a header read where the header may be invalid (P4_16 §8.25: the
         value is unspecified); found by abstract interpretation, see below
P4L051   warning: a field of a header written where the header may be invalid
P4L060   table properties: an unknown action or match kind, a default action not in the
         action list or with parameters, a table applied inside an action, an idle-time
         property other than the architecture's (TNA ``idle_timeout``, v1model
         ``support_timeout``)
P4L070   a package argument whose parameters do not match the architecture's block type
P4L080   an instance's initializer: a method the extern does not declare abstract, one
         whose parameters differ from the declaration, an abstract method left out
P4L081   a TNA ``RegisterAction`` body a stateful ALU cannot run: it writes something
         other than its own parameters, calls anything, uses an operator the ALU lacks
         (``* / % << >>``, slices), reads more than two packet fields or one wider than
         32 bits, compares more than twice, assigns more than one operation's result, or
         keeps cells of other than 1, 8, 16 or 32 bits
P4L061   a TNA / T2NA table matching both ``lpm`` and ``range`` fields: the Tofino back
         end refuses it ("Cannot match on both range and LPM fields")      p4c-barefoot
P4L083   a TNA / T2NA header field assigned a header's validity (``hdr.b.v =
         (bit<1>)hdr.a.isValid()``): p4c's Tofino back end offers to alias the two and
         stops on an internal error (``pa_alias.cpp``: "Did not calculate aliasDest and
         aliasSrc"; tools/real-p4/upstream/pov_alias.p4); write constants under an ``if``
                                                                           p4c-barefoot
P4L082   a register executed at more than one place in a control (TNA: a packet passes a
         register's stateful ALU once; v1model's twin keeps the same shape)
=======  =================================================================================

Types resolve through the program's declarations and ``targets.p4.intrinsics``; typedefs
are transparent (``PortId_t`` is ``bit<9>``), untyped integer literals take the width of
the other operand and must fit it.

P4L050 interprets each dataflow of the package (v1model: parser, verify-checksum,
ingress, egress, compute-checksum, deparser; TNA: ingress parser, ingress, ingress
deparser, and the egress thread): an abstract state is the set of valid headers plus the
metadata fields known to hold a constant (``meta.x = 8w1``, named constants, enum
members).  The parser is explored path by path from ``start``: extracts make headers
valid; each extract of a packet header, and each ``lookahead``, may also fail, which ends
the parser in ``reject`` with the parser error set (v1model ``standard_metadata.parser_error``,
TNA ``ig_prsr_md.parser_err``) and the ingress still runs; select cases are followed unless
a known constant decides them.  Controls run statement by statement: ``if`` conditions
on ``isValid()`` and on known constants prune branches (``&&`` / ``||`` short-circuit, so
``h.isValid() && h.f == 1`` is guarded), unknown conditions fork and refine (``x == K``
holds in the then-branch), ``setValid`` / ``setInvalid`` update, tables run each of their
actions, actions called directly run inline, ``exit`` ends the control (later blocks
still see the packet).  The states are a set deduplicated at every join, and keep only
the constants that may still decide a branch: of locations read in a condition (or
copied into one), and live there (read further on before being written; found once per
dataflow, backwards over its blocks).  A constant that can no longer prune anything
would only tell states apart, and along a long pipeline those multiply (issue 47: a
37-stage pipeline's lint took minutes); the findings are those of the full states.  A field read
is reported when its header is invalid in any state that reaches it, with one parser path
that leads there.  Architecture-supplied headers (``ig_intr_md``) are always valid; the
data and checksum arguments of v1model's ``update_checksum`` / ``verify_checksum`` are
read only where their ``condition`` argument may be true.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import assert_never

from targets.p4 import intrinsics as ix
from targets.p4 import syntax as p
from targets.p4.printer import expr as _print_expr
from targets.p4.printer import type_ as _print_type

__all__ = ["CODES", "LintError", "lint", "validity_work"]

CODES = {
    "P4L001": "duplicate declaration",
    "P4L002": "architecture mismatch",
    "P4L010": "table applied at more than one place",
    "P4L020": "shift amount wider than 8 bits",
    "P4L021": "shift operand",
    "P4L030": "unknown name or type",
    "P4L031": "unknown member",
    "P4L040": "operand width or type mismatch",
    "P4L041": "assignment type mismatch",
    "P4L042": "not a bool",
    "P4L043": "literal does not fit",
    "P4L044": "slice out of range",
    "P4L045": "illegal cast",
    "P4L046": "wrong number of arguments",
    "P4L047": "argument type mismatch",
    "P4L048": "not a writable l-value",
    "P4L049": "select keyset or state",
    "P4L050": "read of a possibly invalid header",
    "P4L051": "write to a possibly invalid header",
    "P4L060": "table property",
    "P4L061": "lpm and range in one Tofino table",
    "P4L070": "package block mismatch",
    "P4L080": "instance initializer",
    "P4L081": "stateful ALU",
    "P4L082": "register executed at more than one place",
    "P4L083": "validity bit copied into a Tofino header field",
}


@dataclass(frozen=True, slots=True)
class LintError:
    code: str  # a key of CODES
    where: str  # the place in the tree: "control Ingress › action nfc_fold_ipv4"
    name: str  # the object: a declaration name, an expression, a header
    message: str  # "X must be Y, not Z"
    severity: str = "error"  # or "warning"

    def __str__(self) -> str:
        return f"{self.severity}[{self.code}] {self.where}: {self.message}"


def lint(program: p.Program, arch: str, *, exact: bool = False) -> list[LintError]:
    """Every finding on ``program`` for architecture ``arch`` ("tna", "t2na", "v1model"),
    errors and warnings, sorted by code and place (ValueError for another ``arch``).
    ``exact``: P4L050's states keep every constant, not only those that may still decide a
    branch: the same findings, in time exponential in a pipeline's length (the reference
    tests/test_compile_scale.py checks the default against)."""
    return _Lint(program, arch, exact).run()


def validity_work(program: p.Program, arch: str, *, exact: bool = False) -> int:
    """How many abstract states P4L050's analysis ran through statements while linting
    ``program``, over all its dataflows: its work, in units a test can compare across
    program sizes (it grows linearly with the pipeline; wall time would depend on the machine)."""
    checker = _Lint(program, arch, exact)
    checker.run()
    return checker.validity_work


# ---- types ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _T:
    """A type as the checker sees it.  kind: bit, bool, int (an untyped integer), error,
    enum, header, struct, extern, tuple, table, table_result, action, block, package,
    enumtype, errortype, function, void, unknown."""

    kind: str
    width: int = 0
    name: str = ""
    args: tuple[_T, ...] = ()
    value: int | None = None  # an untyped literal's value
    alias: str = ""  # the typedef it was named by


_BOOL = _T("bool")
_UNK = _T("unknown")
_VOID = _T("void")
_ERROR = _T("error")


def _bit(width: int, alias: str = "") -> _T:
    return _T("bit", width, alias=alias)


def _tstr(t: _T) -> str:
    match t.kind:
        case "bit":
            return f"{t.alias} (bit<{t.width}>)" if t.alias else f"bit<{t.width}>"
        case "int":
            return "an untyped integer"
        case "bool" | "error" | "void":
            return t.kind
        case "enum" | "header" | "struct" | "extern" | "table" | "action" | "block" | "package":
            args = f"<{', '.join(_tstr(a) for a in t.args)}>" if t.args else ""
            return f"{t.kind} {t.name}{args}"
        case "tuple":
            return "{" + ", ".join(_tstr(a) for a in t.args) + "}"
        case _:
            return t.kind


def _same(a: _T, b: _T) -> bool:
    if a.kind == "unknown" or b.kind == "unknown":
        return True
    if a.kind != b.kind:
        return False
    if a.kind == "bit":
        return a.width == b.width
    if a.kind in ("enum", "header", "struct", "extern", "table", "action", "block"):
        return a.name == b.name
    if a.kind == "tuple":
        return len(a.args) == len(b.args) and all(_same(x, y) for x, y in zip(a.args, b.args, strict=True))
    return True


def _fits(value: int, width: int) -> bool:
    return 0 <= value < (1 << width)


def _show(e: p.Expr, limit: int = 90) -> str:
    text = _print_expr(e)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---- scopes --------------------------------------------------------------------------------


@dataclass
class _Scope:
    where: str
    index: int  # top-level declarations before this one are visible
    params: dict[str, tuple[str, _T]] = field(default_factory=dict)  # name → (direction, type)
    instances: dict[str, _T] = field(default_factory=dict)
    actions: dict[str, p.Action] = field(default_factory=dict)
    tables: dict[str, p.Table] = field(default_factory=dict)
    action_params: dict[str, _T] = field(default_factory=dict)
    in_action: str = ""
    in_parser: bool = False

    def at(self, where: str) -> _Scope:
        return _Scope(where, self.index, self.params, self.instances, self.actions, self.tables, self.action_params,
                      self.in_action, self.in_parser)


_ARITH = {"+", "-", "*", "/", "%", "&", "|", "^", "|+|", "|-|"}
# what a Tofino stateful ALU computes (add/sub, saturating, bitwise, compare; no multiply, divide or shift)
_SALU_OPS = {"+", "-", "&", "|", "^", "|+|", "|-|", "~", "!", "==", "!=", "<", "<=", ">", ">=", "&&", "||"}
_EQ = {"==", "!="}
_ORD = {"<", "<=", ">", ">="}
_LOGIC = {"&&", "||"}
_SHIFT = {"<<", ">>"}
# the table property each architecture keeps per-entry idle time with (tofino1_arch.p4 tables; p4c-bm2-ss)
TOFINO = ("tna", "t2na")
IDLE_PROPERTY = {"tna": "idle_timeout", "t2na": "idle_timeout", "v1model": "support_timeout"}


class _Lint:
    def __init__(self, program: p.Program, arch: str, exact: bool = False) -> None:
        self.prog = program
        self.arch = arch
        self.exact = exact  # see lint()
        self.errors: dict[tuple[str, str, str, str], LintError] = {}
        self.validity_work = 0  # see validity_work()
        self.i_types = ix.types(arch)
        self.i_typedefs = ix.typedefs(arch)
        self.i_consts = ix.constants(arch)
        self.i_const_types = ix.constant_types(arch)
        self.i_enum_types = ix.enum_types(arch)
        self.i_enum_members = ix.enum_members(arch)
        self.i_externs = ix.externs(arch)
        self.i_functions = ix.functions(arch)
        self.i_blocks = ix.blocks(arch)
        self.i_packages = ix.packages(arch)
        self.match_kinds = ix.match_kinds(arch)
        # top-level declarations: name → (index, declaration), first one wins
        self.decls: dict[str, tuple[int, p.Decl]] = {}
        for i, d in enumerate(program.decls):
            self.decls.setdefault(d.name, (i, d))

    # -- reporting --

    def err(self, code: str, where: str, name: str, message: str, severity: str = "error") -> None:
        self.errors.setdefault((code, where, name, message), LintError(code, where, name, message, severity))

    def run(self) -> list[LintError]:
        try:
            included = ix.arch_of(self.prog)
        except ValueError as e:
            self.err("P4L002", "preamble", "#include", str(e))
        else:
            if included != self.arch:
                self.err("P4L002", "preamble", "#include",
                         f"the architecture must be the one the preamble includes ({included}), not {self.arch}")
        self.check_duplicates()
        self.check_decls()
        self.check_packages()
        for flow in self.flows():
            validity = _Validity(self, flow)
            validity.run()
            self.validity_work += validity.visits
        return sorted(self.errors.values(), key=lambda e: (e.code, e.where, e.name, e.message))

    # -- check 1: duplicate declarations --

    def _dups(self, where: str, names: list[tuple[str, str]]) -> None:
        seen: dict[str, list[str]] = {}
        for name, kind in names:
            seen.setdefault(name, []).append(kind)
        for name, kinds in seen.items():
            if len(kinds) > 1:
                self.err("P4L001", where, name, f"`{name}` must be declared once in {where}, "
                                                f"not {len(kinds)} times ({', '.join(kinds)})")

    def check_duplicates(self) -> None:
        arch_names: list[tuple[str, str]] = [(n, f"{self.arch} type") for n in self.i_types]
        arch_names += [(n, f"{self.arch} typedef") for n in self.i_typedefs]
        arch_names += [(n, f"{self.arch} constant") for n in self.i_consts]
        arch_names += [(n, f"{self.arch} enum") for n in self.i_enum_types if n != "error"]
        arch_names += [(n, f"{self.arch} extern") for n in self.i_externs]
        arch_names += [(n, f"{self.arch} function") for n in self.i_functions]
        arch_names += [(n, f"{self.arch} block type") for n in self.i_blocks]
        arch_names += [(n, f"{self.arch} package") for n in self.i_packages]
        top = [(d.name, _kind(d)) for d in self.prog.decls]
        self._dups("the top level", arch_names + top)
        for d in self.prog.decls:
            match d:
                case p.HeaderType() | p.Struct():
                    self._dups(f"{_kind(d)} {d.name}", [(n, "field") for n, _ in d.fields])
                case p.Parser():
                    names = [(prm.name, "parameter") for prm in d.params] + [(i.name, "instance") for i in d.locals]
                    names += [(s.name, "state") for s in d.states]
                    names += [(s.name, "state (reserved)") for s in d.states if s.name in ("accept", "reject")]
                    self._dups(f"parser {d.name}", names)
                case p.Control():
                    names = [(prm.name, "parameter") for prm in d.params]
                    names += [(x.name, _kind(x)) for x in d.locals]
                    self._dups(f"control {d.name}", names)
                    for a in d.locals:
                        if isinstance(a, p.Action):
                            self._dups(f"control {d.name} › action {a.name}", [(n, "parameter") for n, _ in a.params])
                case _:
                    pass

    # -- type resolution --

    def composite(self, name: str) -> tuple[str, dict[str, p.Type]] | None:
        """("header" | "struct", fields) of a named header or struct type, program or architecture."""
        entry = self.decls.get(name)
        d = entry[1] if entry else self.i_types.get(name)
        if isinstance(d, p.HeaderType):
            return "header", dict(d.fields)
        if isinstance(d, p.Struct):
            return "struct", dict(d.fields)
        return None

    def resolve(self, t: p.Type, scope: _Scope, tvars: dict[str, _T | None] | None = None,
                what: str = "") -> _T:
        match t:
            case p.Bits():
                return _bit(t.width)
            case p.Bool():
                return _BOOL
            case p.TypeName():
                return self._resolve_name(t, scope, tvars or {}, what)
        return _UNK  # pragma: no cover

    def _resolve_name(self, t: p.TypeName, scope: _Scope, tvars: dict[str, _T | None], what: str) -> _T:
        name = t.name
        if name in tvars:
            bound = tvars[name]
            return bound if bound is not None else _T("unknown", name=name)
        if name == "_":
            return _UNK
        if name == "error":
            return _ERROR
        entry = self.decls.get(name)
        if entry is not None:
            i, d = entry
            if i >= scope.index:
                self.err("P4L030", scope.where, name, f"type `{name}`{what} must be declared before its use, "
                                                      f"not after it (declaration #{i + 1})")
            if isinstance(d, p.Typedef):
                inner = self.resolve(d.type, scope, tvars)
                return _T(inner.kind, inner.width, inner.name, inner.args, alias=name)
            if isinstance(d, p.HeaderType | p.Struct):
                return _T("header" if isinstance(d, p.HeaderType) else "struct", name=name)
            if isinstance(d, p.Parser | p.Control):
                return _T("block", name=name)
        if name in self.i_typedefs:
            inner = self.resolve(self.i_typedefs[name], scope, tvars)
            return _T(inner.kind, inner.width, inner.name, inner.args, alias=name)
        if name in self.i_types:
            return _T("header" if isinstance(self.i_types[name], p.HeaderType) else "struct", name=name)
        if name in self.i_enum_types:
            rep = self.i_enum_types[name]
            return _T("enum", rep.width if isinstance(rep, p.Bits) else 0, name)
        if name in self.i_externs:
            sig = self.i_externs[name]
            args = tuple(self.resolve(a, scope, tvars) for a in t.args)
            if len(args) != len(sig.type_params):
                self.err("P4L046", scope.where, name, f"extern type {name}{what} must have {len(sig.type_params)} "
                                                      f"type argument(s), not {len(args)}")
            return _T("extern", name=name, args=args)
        if name in self.i_packages or name in self.i_blocks:
            return _T("package" if name in self.i_packages else "block", name=name)
        self.err("P4L030", scope.where, name, f"type `{name}`{what} must be declared (by the program or "
                                              f"{self.arch}), not unknown")
        return _UNK

    # -- expressions --

    def type_of(self, e: p.Expr, scope: _Scope) -> _T:
        match e:
            case p.Const():
                if e.width == 0:
                    return _BOOL
                if e.width < 0:
                    return _T("int", value=e.value)
                if not _fits(e.value, e.width):
                    self.err("P4L043", scope.where, _show(e),
                             f"literal {_show(e)} must fit in {e.width} bits, not need {max(e.value.bit_length(), 1)}")
                return _bit(e.width)
            case p.Path():
                return self._path(e.name, scope)
            case p.Member():
                return self._member(e, scope)
            case p.Bin():
                return self._bin(e, scope)
            case p.Un():
                return self._un(e, scope)
            case p.Cast():
                return self._cast(e, scope)
            case p.Slice():
                base = self.type_of(e.base, scope)
                if base.kind == "unknown":
                    return _UNK
                if base.kind != "bit":
                    self.err("P4L044", scope.where, _show(e), f"the base of slice `{_show(e)}` must be a bit<N>, "
                                                              f"not {_tstr(base)}")
                    return _UNK
                if not (base.width > e.hi >= e.lo >= 0):
                    self.err("P4L044", scope.where, _show(e),
                             f"slice [{e.hi}:{e.lo}] of `{_show(e.base)}` must be within {_tstr(base)}, "
                             f"not reach bit {e.hi}")
                    return _bit(max(e.hi - e.lo + 1, 1))
                return _bit(e.hi - e.lo + 1)
            case p.Call():
                return self.call(e, scope)
            case p.ListExpr():
                return _T("tuple", args=tuple(self.type_of(i, scope) for i in e.items))
            case p.Mask() | p.Range() | p.Default():
                self.err("P4L049", scope.where, _show(e), f"`{_show(e)}` must be a select keyset, not an expression")
                return _UNK
        return _UNK  # pragma: no cover

    def _path(self, name: str, scope: _Scope) -> _T:
        if name in scope.action_params:
            return scope.action_params[name]
        if name in scope.params:
            return scope.params[name][1]
        if name in scope.instances:
            return scope.instances[name]
        if name in scope.tables:
            return _T("table", name=name)
        if name in scope.actions:
            return _T("action", name=name)
        entry = self.decls.get(name)
        if entry is not None:
            i, d = entry
            if i >= scope.index:
                self.err("P4L030", scope.where, name, f"`{name}` must be declared before its use, not after it")
            if isinstance(d, p.ConstDecl):
                return self.resolve(d.type, scope)
            if isinstance(d, p.Instance):
                return self.resolve(d.type, scope)
            if isinstance(d, p.Parser | p.Control):
                return _T("block", name=name)
        if name in self.i_consts:
            ct = self.i_const_types[name]
            return self.resolve(ct, scope) if ct is not None else _T("int", value=self.i_consts[name])
        if name in self.i_enum_types and name != "error":
            return _T("enumtype", name=name)
        if name == "error":
            return _T("errortype")
        if name in self.i_functions:
            return _T("function", name=name)
        self.err("P4L030", scope.where, name, f"`{name}` must be declared (by the program or {self.arch}), not unknown")
        return _UNK

    def _member(self, e: p.Member, scope: _Scope) -> _T:
        base = self.type_of(e.base, scope)
        match base.kind:
            case "unknown":
                return _UNK
            case "enumtype":
                if f"{base.name}.{e.field}" not in self.i_enum_members:
                    self.err("P4L031", scope.where, _show(e), f"`{e.field}` must be a member of enum {base.name}, "
                                                              f"not unknown")
                    return _UNK
                rep = self.i_enum_types[base.name]
                return _T("enum", rep.width if isinstance(rep, p.Bits) else 0, base.name)
            case "errortype":
                if f"error.{e.field}" not in self.i_enum_members:
                    self.err("P4L031", scope.where, _show(e), f"`{e.field}` must be declared in error, not unknown")
                return _ERROR
            case "header" | "struct":
                comp = self.composite(base.name)
                if comp is None or e.field not in comp[1]:
                    self.err("P4L031", scope.where, _show(e), f"`{e.field}` must be a field of {_tstr(base)}, "
                                                              f"not unknown")
                    return _UNK
                return self.resolve(comp[1][e.field], scope)
            case "table_result":
                if e.field in ("hit", "miss"):
                    return _BOOL
                if e.field == "action_run":
                    return _UNK
        self.err("P4L031", scope.where, _show(e), f"`{_show(e)}` must name a field or member, "
                                                  f"not `{e.field}` of {_tstr(base)}")
        return _UNK

    def _literal_into(self, lit: _T, width: int, where: str, what: str) -> None:
        if lit.kind == "int" and lit.value is not None and not _fits(lit.value, width):
            self.err("P4L043", where, what, f"the integer {lit.value} in `{what}` must fit in {width} bits, "
                                            f"not need {lit.value.bit_length()}")

    def _bin(self, e: p.Bin, scope: _Scope) -> _T:
        lt, rt = self.type_of(e.left, scope), self.type_of(e.right, scope)
        op, text = e.op, _show(e)
        if op in _LOGIC:
            for side, t in (("left", lt), ("right", rt)):
                if t.kind not in ("bool", "unknown"):
                    self.err("P4L042", scope.where, text, f"the {side} operand of `{op}` in `{text}` must be bool, "
                                                          f"not {_tstr(t)}")
            return _BOOL
        if lt.kind == "unknown" or rt.kind == "unknown":
            return _BOOL if op in _EQ | _ORD else _UNK
        if op in _SHIFT:
            return self._shift(e, lt, rt, scope)
        if op == "++":
            if lt.kind == "bit" and rt.kind == "bit":
                return _bit(lt.width + rt.width)
            bad = lt if lt.kind != "bit" else rt
            self.err("P4L040", scope.where, text, f"the operands of `++` in `{text}` must be bit<N> of known width, "
                                                  f"not {_tstr(bad)}")
            return _UNK
        if op in _EQ:
            if lt.kind == "bit" and rt.kind == "int":
                self._literal_into(rt, lt.width, scope.where, text)
                return _BOOL
            if lt.kind == "int" and rt.kind == "bit":
                self._literal_into(lt, rt.width, scope.where, text)
                return _BOOL
            if lt.kind == rt.kind and lt.kind in ("bit", "bool", "int", "error", "enum", "header", "struct") \
                    and _same(lt, rt):
                return _BOOL
            self.err("P4L040", scope.where, text, f"the operands of `{op}` in `{text}` must have the same type, "
                                                  f"not {_tstr(lt)} and {_tstr(rt)}")
            return _BOOL
        numeric = ("bit", "int")
        if lt.kind not in numeric or rt.kind not in numeric:
            bad = lt if lt.kind not in numeric else rt
            self.err("P4L040", scope.where, text, f"the operands of `{op}` in `{text}` must be bit<N> or integers, "
                                                  f"not {_tstr(bad)}")
            return _BOOL if op in _ORD else _UNK
        result: _T
        if lt.kind == "bit" and rt.kind == "bit":
            if lt.width != rt.width:
                self.err("P4L040", scope.where, text, f"the operands of `{op}` in `{text}` must have the same width, "
                                                      f"not {lt.width} and {rt.width}")
            result = _bit(lt.width)
        elif lt.kind == "bit":
            self._literal_into(rt, lt.width, scope.where, text)
            result = _bit(lt.width)
        elif rt.kind == "bit":
            self._literal_into(lt, rt.width, scope.where, text)
            result = _bit(rt.width)
        else:
            result = _T("int")
        return _BOOL if op in _ORD else result

    def _shift(self, e: p.Bin, lt: _T, rt: _T, scope: _Scope) -> _T:
        text = _show(e)
        if rt.kind == "bit" and rt.width > 8:
            on_bmv2 = self.arch == "v1model"
            self.err("P4L020", scope.where, text,
                     f"the shift amount of `{text}` must be an untyped integer or at most 8 bits wide"
                     f"{' (p4c-bm2-ss)' if on_bmv2 else ' (for the v1model twin)'}, not {_tstr(rt)}",
                     "error" if on_bmv2 else "warning")
        elif rt.kind == "int" and rt.value is not None and rt.value < 0:
            self.err("P4L021", scope.where, text, f"the shift amount of `{text}` must not be negative, "
                                                  f"not {rt.value}")
        elif rt.kind not in ("bit", "int"):
            self.err("P4L040", scope.where, text, f"the shift amount of `{text}` must be bit<N> or an integer, "
                                                  f"not {_tstr(rt)}")
        if lt.kind == "int":
            if rt.kind == "bit":
                self.err("P4L021", scope.where, text, f"the left operand of `{text}` must have a known width when the "
                                                      f"amount is {_tstr(rt)}, not be an untyped integer")
            return _T("int")
        if lt.kind != "bit":
            self.err("P4L040", scope.where, text, f"the left operand of `{text}` must be bit<N>, not {_tstr(lt)}")
            return _UNK
        if rt.kind == "int" and rt.value is not None and rt.value >= lt.width:
            self.err("P4L021", scope.where, text, f"the shift amount of `{text}` must be below the operand's width "
                                                  f"{lt.width}, not {rt.value}", "warning")
        return _bit(lt.width, lt.alias)

    def _un(self, e: p.Un, scope: _Scope) -> _T:
        t = self.type_of(e.operand, scope)
        text = _show(e)
        if t.kind == "unknown":
            return _BOOL if e.op == "!" else _UNK
        if e.op == "!":
            if t.kind != "bool":
                self.err("P4L042", scope.where, text, f"the operand of `!` in `{text}` must be bool, not {_tstr(t)}")
            return _BOOL
        if e.op == "~":
            if t.kind != "bit":
                self.err("P4L040", scope.where, text, f"the operand of `~` in `{text}` must be bit<N>, "
                                                      f"not {_tstr(t)}")
                return _UNK
            return _bit(t.width)
        if e.op == "-":
            if t.kind not in ("bit", "int"):
                self.err("P4L040", scope.where, text, f"the operand of `-` in `{text}` must be bit<N> or an integer, "
                                                      f"not {_tstr(t)}")
                return _UNK
            return t
        self.err("P4L040", scope.where, text, f"the operator of `{text}` must be !, ~ or -, not {e.op}")
        return _UNK

    def _cast(self, e: p.Cast, scope: _Scope) -> _T:
        to = self.resolve(e.type, scope, what=f" in `{_show(e)}`")
        src = self.type_of(e.operand, scope)
        text = _show(e)
        if to.kind == "unknown" or src.kind == "unknown":
            return to
        ok = False
        if to.kind == "bit":
            ok = src.kind in ("bit", "int") or (src.kind == "bool" and to.width == 1) or \
                 (src.kind == "enum" and src.width == to.width and src.width > 0)
        elif to.kind == "bool":
            ok = src.kind == "bool" or (src.kind == "bit" and src.width == 1) or \
                 (src.kind == "int" and src.value in (0, 1))
        elif to.kind == "enum" and to.width:
            ok = (src.kind == "bit" and src.width == to.width) or (src.kind == "enum" and src.name == to.name)
        else:
            ok = _same(to, src)
        if not ok:
            need = {"bit": "bit<M>, an integer" + (" or bool" if to.width == 1 else ""),
                    "bool": "bit<1> or bool"}.get(to.kind, _tstr(to))
            self.err("P4L045", scope.where, text, f"the operand of the cast `{text}` to {_tstr(to)} must be {need}, "
                                                  f"not {_tstr(src)}")
        return to

    # -- calls --

    def signature(self, call: p.Call,
                  scope: _Scope) -> tuple[str, tuple[ix.MethodSig, ...], dict[str, _T | None]] | None:
        """(what, overloads, type-variable bindings) of a call's callee, without reporting."""
        target = call.target
        if isinstance(target, p.Member):
            obj = self.quiet_type(target.base, scope)
            if obj.kind == "header":
                sig = ix.header_methods().get(target.field)
                return (f"{_show(target)}", (sig,), {}) if sig else None
            if obj.kind == "extern":
                ext = self.i_externs.get(obj.name)
                if ext is None:
                    return None
                env: dict[str, _T | None] = dict(zip(ext.type_params, obj.args, strict=False))
                return f"{obj.name}.{target.field}", ext.overloads(target.field), env
            return None
        if isinstance(target, p.Path) and target.name in self.i_functions and target.name not in scope.actions:
            return target.name, self.i_functions[target.name], {}
        return None

    def quiet_type(self, e: p.Expr, scope: _Scope) -> _T:
        saved = dict(self.errors)
        t = self.type_of(e, scope)
        self.errors = saved
        return t

    def call(self, c: p.Call, scope: _Scope) -> _T:
        target, text = c.target, _show(c)
        if isinstance(target, p.Member):
            obj = self.type_of(target.base, scope)
            if obj.kind == "unknown":
                for a in c.args:
                    self.type_of(a, scope)
                return _UNK
            if obj.kind == "table":
                if target.field != "apply":
                    self.err("P4L031", scope.where, text, f"the method of table {obj.name} must be apply, "
                                                          f"not {target.field}")
                elif scope.in_action:
                    self.err("P4L060", scope.where, obj.name, f"table {obj.name} must be applied in a control's "
                                                              f"apply block, not in action {scope.in_action}")
                self._arity(text, 0, 0, len(c.args), scope)
                return _T("table_result", name=obj.name)
            if obj.kind == "header":
                sig = ix.header_methods().get(target.field)
                if sig is None:
                    self.err("P4L031", scope.where, text, f"`{target.field}` must be isValid, setValid or setInvalid "
                                                          f"on header {obj.name}, not unknown")
                    return _UNK
                if target.field != "isValid":
                    why = self.writable(target.base, scope)
                    if why:
                        self.err("P4L048", scope.where, text, f"the header of `{text}` must be writable, not {why}")
                return self._apply_sig(text, (sig,), {}, c, scope)
            if obj.kind == "extern":
                ext = self.i_externs.get(obj.name)
                overloads = ext.overloads(target.field) if ext else ()
                if not overloads:
                    self.err("P4L031", scope.where, text, f"`{target.field}` must be a method of extern {obj.name}, "
                                                          f"not unknown")
                    return _UNK
                env: dict[str, _T | None] = dict(zip(ext.type_params if ext else (), obj.args, strict=False))
                return self._apply_sig(text, overloads, env, c, scope)
            self.err("P4L031", scope.where, text, f"`{_show(target)}` must be a method, not a member of {_tstr(obj)}")
            return _UNK
        if isinstance(target, p.Path):
            name = target.name
            if name in scope.actions and name not in scope.action_params:
                action = scope.actions[name]
                self._arity(text, len(action.params), len(action.params), len(c.args), scope)
                for (pname, ptype), arg in zip(action.params, c.args, strict=False):
                    self._arg(text, pname, "", self.resolve(ptype, scope), arg, scope, {})
                return _VOID
            t = self.type_of(target, scope)
            if t.kind == "function":
                return self._apply_sig(text, self.i_functions[name], {}, c, scope)
            if t.kind == "block":
                return t
            if t.kind != "unknown":
                self.err("P4L031", scope.where, text, f"`{name}` must be an action or function to be called, "
                                                      f"not {_tstr(t)}")
            return _UNK
        self.err("P4L031", scope.where, text, f"the callee of `{text}` must be a name or a method, not an expression")
        return _UNK

    def _arity(self, text: str, lo: int, hi: int, n: int, scope: _Scope) -> bool:
        if lo <= n <= hi:
            return True
        want = str(lo) if lo == hi else f"{lo} to {hi}"
        self.err("P4L046", scope.where, text, f"`{text}` must have {want} argument(s), not {n}")
        return False

    def _apply_sig(self, text: str, overloads: tuple[ix.MethodSig, ...], env: dict[str, _T | None], c: p.Call,
                   scope: _Scope) -> _T:
        n = len(c.args)
        fitting = [s for s in overloads if sum(not q.optional for q in s.params) <= n <= len(s.params)]
        if not fitting:
            lo = min(sum(not q.optional for q in s.params) for s in overloads)
            hi = max(len(s.params) for s in overloads)
            self._arity(text, lo, hi, n, scope)
            for a in c.args:
                self.type_of(a, scope)
            return _UNK
        best: tuple[ix.MethodSig, dict[tuple[str, str, str, str], LintError], dict[str, _T | None]] | None = None
        for sig in fitting:
            saved = dict(self.errors)
            local = dict(env)
            for tp in sig.type_params:
                local[tp] = None
            if c.type_args:
                if len(c.type_args) != len(sig.type_params):
                    self.err("P4L046", scope.where, text, f"`{text}` must have {len(sig.type_params)} type "
                                                          f"argument(s), not {len(c.type_args)}")
                for tp, ta in zip(sig.type_params, c.type_args, strict=False):
                    local[tp] = self.resolve(ta, scope)
            for prm, arg in zip(sig.params, c.args, strict=False):
                self._arg(text, prm.name, prm.direction, self.resolve(prm.type, scope, local), arg, scope, local,
                          prm.type)
            new = {k: v for k, v in self.errors.items() if k not in saved}
            self.errors = saved
            if not new:
                best = (sig, new, local)
                break
            if best is None:
                best = (sig, new, local)
        assert best is not None
        sig, new, local = best
        self.errors.update(new)
        return self.resolve(sig.returns, scope, local) if sig.returns is not None else _VOID

    def _arg(self, text: str, pname: str, direction: str, ptype: _T, arg: p.Expr, scope: _Scope,
             env: dict[str, _T | None], declared: p.Type | None = None) -> None:
        at = self.type_of(arg, scope)
        if direction in ("out", "inout"):
            why = self.writable(arg, scope)
            if why:
                self.err("P4L048", scope.where, _show(arg), f"the {direction} argument `{_show(arg)}` of `{text}` "
                                                            f"must be a writable l-value, not {why}")
        if isinstance(declared, p.TypeName) and declared.name in env and env[declared.name] is None:
            env[declared.name] = at if at.kind != "unknown" else None
            return
        problem = self.assignable(ptype, at)
        if problem:
            self.err("P4L047", scope.where, _show(arg), f"the argument {pname} of `{text}` must be {_tstr(ptype)}, "
                                                        f"not {problem}")

    def assignable(self, dst: _T, src: _T) -> str:
        """"" if a value of ``src`` can be stored in ``dst``, else what ``src`` is."""
        if dst.kind == "unknown" or src.kind == "unknown":
            return ""
        if dst.kind == "bit":
            if src.kind == "bit" and src.width == dst.width:
                return ""
            if src.kind == "int":
                return "" if src.value is None or _fits(src.value, dst.width) else \
                    f"{src.value}, which needs {src.value.bit_length()} bits"
            return _tstr(src)
        if dst.kind == "int":
            return "" if src.kind == "int" else _tstr(src)
        if dst.kind == "enum" and dst.width and src.kind == "int":
            return ""
        if dst.kind == "tuple" and src.kind == "tuple" and len(dst.args) == len(src.args):
            return "" if all(not self.assignable(a, b) for a, b in zip(dst.args, src.args, strict=True)) else _tstr(src)
        return "" if dst.kind == src.kind and _same(dst, src) else _tstr(src)

    def writable(self, e: p.Expr, scope: _Scope) -> str:
        """"" if ``e`` is a writable l-value, else why not."""
        match e:
            case p.Path():
                if e.name in scope.action_params:
                    return f"action parameter {e.name} (read-only)"
                if e.name in scope.params:
                    direction = scope.params[e.name][0]
                    return "" if direction in ("out", "inout") else \
                        f"parameter {e.name}, which is {direction or 'directionless'}"
                return f"`{e.name}`, which is not a variable"
            case p.Member():
                return self.writable(e.base, scope)
            case p.Slice():
                return self.writable(e.base, scope)
        return f"`{_show(e)}`, which is not an l-value"

    # -- statements --

    def stmts(self, stmts: tuple[p.Stmt, ...], scope: _Scope) -> None:
        for s in stmts:
            self.stmt(s, scope)

    def stmt(self, s: p.Stmt, scope: _Scope) -> None:
        match s:
            case p.Assign():
                lt, rt = self.type_of(s.target, scope), self.type_of(s.value, scope)
                why = self.writable(s.target, scope)
                text = f"{_show(s.target)} = {_show(s.value, 60)}"
                if why:
                    self.err("P4L048", scope.where, _show(s.target), f"the target of `{text}` must be a writable "
                                                                     f"l-value, not {why}")
                problem = self.assignable(lt, rt)
                if problem:
                    self.err("P4L041", scope.where, _show(s.target), f"the right side of `{text}` must be {_tstr(lt)}, "
                                                                     f"not {problem}")
                value = s.value
                while isinstance(value, p.Cast):
                    value = value.operand
                if self.arch in TOFINO and isinstance(s.target, p.Member) and isinstance(value, p.Call) \
                        and isinstance(value.target, p.Member) and value.target.field == "isValid" \
                        and self.type_of(s.target.base, scope).kind == "header":
                    self.err("P4L083", scope.where, _show(s.target), f"`{text}` must not copy a validity bit into a "
                             "header field (p4c's Tofino back end stops on an internal error in PHV aliasing): "
                             "assign constants under an if")
            case p.If():
                t = self.type_of(s.cond, scope)
                if t.kind not in ("bool", "unknown"):
                    self.err("P4L042", scope.where, _show(s.cond), f"the condition of `if ({_show(s.cond)})` must be "
                                                                   f"bool, not {_tstr(t)}")
                self.stmts(s.then, scope)
                self.stmts(s.orelse, scope)
            case p.CallStmt():
                self.type_of(s.call, scope)
            case p.Exit():
                if scope.in_parser:
                    self.err("P4L031", scope.where, "exit", "`exit` must be in a control or action, not in a parser")
            case p.Comment():
                pass

    # -- declarations --

    def block_scope(self, d: p.Parser | p.Control, index: int) -> _Scope:
        kind = "parser" if isinstance(d, p.Parser) else "control"
        scope = _Scope(f"{kind} {d.name}", index, in_parser=isinstance(d, p.Parser))
        for prm in d.params:
            scope.params[prm.name] = (prm.direction, self.resolve(prm.type, scope, what=f" of parameter {prm.name}"))
        for x in d.locals:
            if isinstance(x, p.Instance):
                scope.instances[x.name] = self.resolve(x.type, scope, what=f" of instance {x.name}")
            elif isinstance(x, p.Action):
                scope.actions[x.name] = x
            else:
                scope.tables[x.name] = x
        return scope

    def check_decls(self) -> None:
        for i, d in enumerate(self.prog.decls):
            scope = _Scope(f"{_kind(d)} {d.name}", i)
            match d:
                case p.HeaderType() | p.Struct():
                    for n, t in d.fields:
                        self.resolve(t, scope, what=f" of field {n}")
                case p.Typedef():
                    self.resolve(d.type, scope)
                case p.ConstDecl():
                    problem = self.assignable(self.resolve(d.type, scope), self.type_of(d.value, scope))
                    if problem:
                        self.err("P4L041", scope.where, d.name, f"the value of constant {d.name} must be "
                                                                f"{_tstr(self.resolve(d.type, scope))}, not {problem}")
                case p.Instance():
                    self.instance(d, scope)
                case p.Parser():
                    self.parser(d, i)
                case p.Control():
                    self.control(d, i)

    def instance(self, inst: p.Instance, scope: _Scope, t: _T | None = None) -> None:
        if t is None:
            t = self.resolve(inst.type, scope, what=f" of instance {inst.name}")
        if t.kind != "extern":
            return  # packages: check_packages
        ext = self.i_externs[t.name]
        if not ext.constructors:
            self.err("P4L031", scope.where, inst.name, f"extern {t.name} must be constructible to be instantiated, "
                                                       f"not an architecture-supplied object")
            return
        env: dict[str, _T | None] = dict(zip(ext.type_params, t.args, strict=False))
        self._apply_sig(f"{_print_type(inst.type)}(…) {inst.name}", ext.constructors, env,
                        p.Call(p.Path(t.name), inst.args), scope)
        self._initializer(inst, ext, env, scope)

    def _initializer(self, inst: p.Instance, ext: ix.ExternSig, env: dict[str, _T | None], scope: _Scope) -> None:
        """The abstract methods ``inst`` implements (P4_16 §10.3.1): each declared by the extern,
        with its parameters; the bodies checked in the enclosing block's scope."""
        declared = {m.name: m for m in ext.abstract}
        for m in inst.methods:
            sig = declared.get(m.name)
            if sig is None:
                self.err("P4L080", scope.where, f"{inst.name}.{m.name}", f"`{m.name}` must be an abstract method of "
                         f"extern {ext.name} ({', '.join(declared) or 'it has none'}), not unknown")
                continue
            inner = _Scope(f"{scope.where} › {m.name}", scope.index, dict(scope.params), scope.instances,
                           scope.actions, scope.tables, dict(scope.action_params), scope.in_action, scope.in_parser)
            required = sum(not q.optional for q in sig.params)
            if not required <= len(m.params) <= len(sig.params):
                self.err("P4L080", inner.where, m.name, f"`{m.name}` must have {required} to {len(sig.params)} "
                                                        f"parameter(s), not {len(m.params)}")
            for prm, want in zip(m.params, sig.params, strict=False):
                got = self.resolve(prm.type, scope)
                wanted = self.resolve(want.type, scope, env)
                if prm.direction != want.direction or self.assignable(wanted, got) or self.assignable(got, wanted):
                    self.err("P4L080", inner.where, prm.name, f"parameter {prm.name} of `{m.name}` must be "
                             f"{want.direction} {_tstr(wanted)} as extern {ext.name} declares it, not "
                             f"{prm.direction} {_tstr(got)}")
                inner.params[prm.name] = (prm.direction, got)
            self.stmts(m.body, inner)
            if ext.name == "RegisterAction":
                self._stateful_alu(m, inner)
        for name in declared.keys() - {m.name for m in inst.methods}:
            self.err("P4L080", scope.where, inst.name, f"instance {inst.name} must implement abstract method "
                                                       f"`{name}` of extern {ext.name}, not leave it out")

    def _stateful_alu(self, m: p.Method, scope: _Scope) -> None:
        own = {prm.name for prm in m.params}
        fields: set[str] = set()
        for s in p.stmts_of(m.body):
            if isinstance(s, p.Assign) and not (isinstance(s.target, p.Path) and s.target.name in own):
                self.err("P4L081", scope.where, _show(s.target), f"`{_show(s.target)}` must not be written by a "
                         f"register action: a stateful ALU writes only its cell and its result ({', '.join(own)})")
            if isinstance(s, p.CallStmt | p.Exit):
                self.err("P4L081", scope.where, m.name, "a register action must only assign and branch, not call "
                                                        "or exit")
        for e in p.exprs_of(m.body):
            if isinstance(e, p.Call):
                self.err("P4L081", scope.where, _show(e), f"`{_show(e)}` must not be called in a register action")
            elif (isinstance(e, p.Bin | p.Un) and e.op not in _SALU_OPS) or isinstance(e, p.Slice):
                what = e.op if isinstance(e, p.Bin | p.Un) else "a slice"
                self.err("P4L081", scope.where, _show(e), f"a stateful ALU has no {what}: `{_show(e)}`")
            elif isinstance(e, p.Member):
                fields.add(_show(e))
        fields = {f for f in fields if not any(g.startswith(f + ".") for g in fields)}  # whole paths only
        if len(fields) > 2:
            self.err("P4L081", scope.where, m.name, f"a register action must read at most 2 packet fields (a "
                     f"stateful ALU's two PHV inputs), not {len(fields)}: {', '.join(sorted(fields))}")
        cell = self.resolve(m.params[0].type, scope) if m.params else _UNK
        if cell.kind == "bit" and cell.width not in (1, 8, 16, 32):
            self.err("P4L081", scope.where, m.name, f"a register cell must be of 1, 8, 16 or 32 bits (what a "
                                                    f"stateful ALU keeps), not {cell.width}")
        compares = sum(isinstance(e, p.Bin) and e.op in _EQ | _ORD for e in p.exprs_of(m.body))
        if compares > 2:
            self.err("P4L081", scope.where, m.name, f"a register action must compare at most twice (a stateful "
                                                    f"ALU's two condition units), not {compares} times")
        for value in (s.value for s in p.stmts_of(m.body) if isinstance(s, p.Assign)):
            if sum(isinstance(e, p.Bin | p.Un) for e in p.subexprs(value)) > 1:
                self.err("P4L081", scope.where, _show(value), f"a register action assigns the result of one "
                                                              f"operation, not `{_show(value)}`")
        for e in p.exprs_of(m.body):
            t = self.quiet_type(e, scope) if isinstance(e, p.Member) else _UNK
            if t.kind == "bit" and t.width > 32:
                self.err("P4L081", scope.where, _show(e), f"a register action reads 32-bit words, not the "
                                                          f"{t.width}-bit `{_show(e)}`")

    def parser(self, d: p.Parser, index: int) -> None:
        base = self.block_scope(d, index)
        for x in d.locals:
            self.instance(x, base.at(f"parser {d.name} › instance {x.name}"), base.instances[x.name])
        states = {s.name for s in d.states} | {"accept", "reject"}
        if "start" not in states:
            self.err("P4L049", base.where, "start", f"parser {d.name} must have a start state, not none")
        for s in d.states:
            scope = base.at(f"parser {d.name} › state {s.name}")
            self.stmts(s.body, scope)
            if not s.select:
                if s.next not in states:
                    self.err("P4L049", scope.where, s.next, f"the next state `{s.next}` must be a state of parser "
                                                            f"{d.name}, not unknown")
                continue
            sel = [self.type_of(e, scope) for e in s.select]
            for c in s.cases:
                if c.next not in states:
                    self.err("P4L049", scope.where, c.next, f"the next state `{c.next}` must be a state of parser "
                                                            f"{d.name}, not unknown")
                if c.keys == (p.Default(),):
                    continue  # `default` matches any select, whatever its arity
                if len(c.keys) != len(sel):
                    self.err("P4L049", scope.where, c.next, f"the keyset of the case to {c.next} must have "
                                                            f"{len(sel)} element(s), not {len(c.keys)}")
                    continue
                for k, st in zip(c.keys, sel, strict=True):
                    self.keyset(k, st, scope)

    def keyset(self, k: p.Expr, st: _T, scope: _Scope) -> None:
        parts: list[p.Expr]
        match k:
            case p.Default():
                return
            case p.Mask():
                parts = [k.value, k.mask]
            case p.Range():
                parts = [k.lo, k.hi]
            case _:
                parts = [k]
        for part in parts:
            problem = self.assignable(st, self.type_of(part, scope))
            if problem:
                self.err("P4L049", scope.where, _show(k), f"the keyset `{_show(k)}` must be {_tstr(st)} like its "
                                                          f"select expression, not {problem}")

    def control(self, d: p.Control, index: int) -> None:
        base = self.block_scope(d, index)
        for x in d.locals:
            match x:
                case p.Instance():
                    self.instance(x, base.at(f"control {d.name} › instance {x.name}"), base.instances[x.name])
                case p.Action():
                    scope = base.at(f"control {d.name} › action {x.name}")
                    scope.in_action = x.name
                    scope.action_params = {n: self.resolve(t, scope, what=f" of parameter {n}") for n, t in x.params}
                    self.stmts(x.body, scope)
                case p.Table():
                    self.table(x, base.at(f"control {d.name} › table {x.name}"))
        self.stmts(d.apply, base.at(f"control {d.name} › apply"))
        # check 2: one apply site per table
        counts: dict[str, int] = {}
        for e in p.exprs_of(d.apply):
            if isinstance(e, p.Call) and isinstance(e.target, p.Member) and e.target.field == "apply" \
                    and isinstance(e.target.base, p.Path) and e.target.base.name in base.tables:
                counts[e.target.base.name] = counts.get(e.target.base.name, 0) + 1
        for t, n in counts.items():
            if n > 1:
                self.err("P4L010", f"control {d.name} › apply", t,
                         f"table {t} must be applied at one place in control {d.name}, not at {n} "
                         f"(p4c-bm2-ss: \"table {t} has multiple successors\")")
        self._register_sites(d)

    def _register_sites(self, d: p.Control) -> None:
        """Check 82: each register executed (TNA: through any of its RegisterActions; v1model: read
        or written) at one place in the control."""
        owner = {x.name: x.args[0].name for x in d.locals if isinstance(x, p.Instance)
                 and x.type.name == "RegisterAction" and x.args and isinstance(x.args[0], p.Path)}
        registers = {x.name for x in d.locals if isinstance(x, p.Instance) and x.type.name == "register"}
        sites: dict[tuple[str, str], list[str]] = {}  # (register, execute / read / write) -> the calls
        bodies = [d.apply, *(a.body for a in d.locals if isinstance(a, p.Action))]
        for e in (e for body in bodies for e in p.exprs_of(body)):
            if isinstance(e, p.Call) and isinstance(e.target, p.Member) and isinstance(e.target.base, p.Path):
                name, method = e.target.base.name, e.target.field
                if name in owner and method == "execute":
                    sites.setdefault((owner[name], method), []).append(_show(e))
                elif name in registers and method in ("read", "write"):
                    sites.setdefault((name, method), []).append(_show(e))
        for (reg, _method), calls in sites.items():
            if len(calls) > 1:
                self.err("P4L082", f"control {d.name}", reg, f"register {reg} must be accessed at one place in "
                         f"control {d.name} (a packet passes its stateful ALU once), not at {len(calls)}: "
                         f"{'; '.join(calls)}")

    def table(self, t: p.Table, scope: _Scope) -> None:
        for k in t.keys:
            self.type_of(k.expr, scope)
            if k.match not in self.match_kinds:
                self.err("P4L060", scope.where, k.name, f"the match kind of key {k.name} must be one of "
                                                        f"{', '.join(sorted(self.match_kinds))}, not {k.match}")
        if self.arch in TOFINO and {"lpm", "range"} <= {k.match for k in t.keys}:
            self.err("P4L061", scope.where, t.name, f"table {t.name} must not match both lpm and range fields "
                                                    f"on {self.arch} (the Tofino back end cannot): make the prefix "
                                                    "ternary")
        for a in t.actions:
            if a not in scope.actions:
                self.err("P4L060", scope.where, a, f"action {a} of table {t.name} must be declared in the control, "
                                                   f"not unknown")
        if t.default_action not in t.actions:
            self.err("P4L060", scope.where, t.default_action,
                     f"the default action of table {t.name} must be one of its actions ({', '.join(t.actions)}), "
                     f"not {t.default_action}")
        action = scope.actions.get(t.default_action)
        if action is not None and action.params:
            self.err("P4L060", scope.where, t.default_action,
                     f"the default action {t.default_action}() of table {t.name} must take no control-plane "
                     f"parameters, not {len(action.params)}")
        if t.size <= 0:
            self.err("P4L060", scope.where, t.name, f"the size of table {t.name} must be positive, not {t.size}")
        idle = IDLE_PROPERTY.get(self.arch)
        if t.idle and t.idle != idle:
            self.err("P4L060", scope.where, t.name, f"the idle-time property of table {t.name} must be {idle} on "
                                                    f"{self.arch}, not {t.idle}")

    # -- packages --

    def check_packages(self) -> None:
        for i, d in enumerate(self.prog.decls):
            if not isinstance(d, p.Instance) or d.type.name not in self.i_packages:
                continue
            pkg = self.i_packages[d.type.name]
            where = f"instance {d.name}"
            need = sum(not q.optional for q in pkg.params)
            if not need <= len(d.args) <= len(pkg.params):
                self.err("P4L070", where, d.name, f"package {pkg.name} must have {need} to {len(pkg.params)} "
                                                  f"argument(s), not {len(d.args)}")
                continue
            binding: dict[str, p.Type] = {}
            for prm, arg in zip(pkg.params, d.args, strict=False):
                assert isinstance(prm.type, p.TypeName)
                self._package_arg(pkg, prm, arg, where, i, binding)

    def _package_arg(self, pkg: ix.PackageSig, prm: ix.ParamSig, arg: p.Expr, where: str, index: int,
                     binding: dict[str, p.Type]) -> None:
        assert isinstance(prm.type, p.TypeName)
        want = prm.type.name
        if want in self.i_packages:  # Switch(pipe): a package instance
            entry = self.decls.get(arg.name) if isinstance(arg, p.Path) else None
            ok = entry is not None and entry[0] < index and isinstance(entry[1], p.Instance) \
                and entry[1].type.name == want
            if not ok:
                self.err("P4L070", where, _show(arg), f"the argument {prm.name} of {pkg.name} must be an instance of "
                                                      f"{want} declared before, not `{_show(arg)}`")
            return
        block = self.i_blocks[want]
        name = arg.target.name if isinstance(arg, p.Call) and isinstance(arg.target, p.Path) else ""
        entry = self.decls.get(name)
        decl = entry[1] if entry else None
        if not isinstance(decl, p.Parser | p.Control) or (block.kind == "parser") != isinstance(decl, p.Parser):
            self.err("P4L070", where, _show(arg), f"the argument {prm.name} of {pkg.name} must be a {block.kind} "
                                                  f"of type {want}, not `{_show(arg)}`")
            return
        tvar = {bp: a.name for bp, a in zip(block.type_params, prm.type.args, strict=False)
                if isinstance(a, p.TypeName)}
        need = sum(not q.optional for q in block.params)
        if not need <= len(decl.params) <= len(block.params):
            self.err("P4L070", f"{block.kind} {decl.name}", decl.name,
                     f"{block.kind} {decl.name} must have {need} to {len(block.params)} parameters as {want} "
                     f"({block.source}), not {len(decl.params)}")
            return
        scope = _Scope(f"{block.kind} {decl.name}", len(self.prog.decls))
        for bp, dp in zip(block.params, decl.params, strict=False):
            if bp.direction != dp.direction:
                self.err("P4L070", f"{block.kind} {decl.name}", dp.name,
                         f"parameter {dp.name} of {decl.name} must be {bp.direction or 'directionless'} as "
                         f"{bp.name} of {want}, not {dp.direction or 'directionless'}")
            if isinstance(bp.type, p.TypeName) and bp.type.name in tvar:
                var = tvar[bp.type.name]
                if var in binding and binding[var] != dp.type:
                    self.err("P4L070", f"{block.kind} {decl.name}", dp.name,
                             f"parameter {dp.name} of {decl.name} must be {_print_type(binding[var])} like the other "
                             f"blocks of {pkg.name} ({var}), not {_print_type(dp.type)}")
                binding.setdefault(var, dp.type)
                continue
            want_t, got_t = self.resolve(bp.type, scope), self.resolve(dp.type, scope)
            if not (want_t.kind == got_t.kind and _same(want_t, got_t)):
                self.err("P4L070", f"{block.kind} {decl.name}", dp.name,
                         f"parameter {dp.name} of {decl.name} must be {_print_type(bp.type)} as {bp.name} of {want}, "
                         f"not {_print_type(dp.type)}")

    def flows(self) -> Iterator[list[p.Parser | p.Control]]:
        """For each package instance whose architecture says how packets flow through it,
        the parser and controls one packet runs through, in order."""
        for d in self.prog.decls:
            if not isinstance(d, p.Instance) or d.type.name not in self.i_packages:
                continue
            pkg = self.i_packages[d.type.name]
            for flow in pkg.flows:
                out: list[p.Parser | p.Control] = []
                for pos in flow:
                    arg = d.args[pos] if pos < len(d.args) else None
                    name = arg.target.name if isinstance(arg, p.Call) and isinstance(arg.target, p.Path) else ""
                    entry = self.decls.get(name)
                    if entry is not None and isinstance(entry[1], p.Parser | p.Control):
                        out.append(entry[1])
                if out and isinstance(out[0], p.Parser):
                    yield out


def _kind(d: object) -> str:
    return {p.HeaderType: "header", p.Struct: "struct", p.Typedef: "typedef", p.ConstDecl: "constant",
            p.Instance: "instance", p.Parser: "parser", p.Control: "control", p.Action: "action",
            p.Table: "table"}.get(type(d), "declaration")


def _decisions(d: p.Parser | p.Control) -> tuple[list[p.Expr], list[tuple[p.Expr, p.Expr]]]:
    """The expressions of ``d`` whose value decides a branch (see ``_Validity._relevant``),
    and its assignments (target, value)."""
    bodies: list[tuple[p.Stmt, ...]] = []
    decided: list[p.Expr] = []
    if isinstance(d, p.Parser):
        bodies += [s.body for s in d.states]
        decided += [e for s in d.states for e in s.select]
    else:
        bodies += [d.apply] + [a.body for a in d.locals if isinstance(a, p.Action)]
    assigned: list[tuple[p.Expr, p.Expr]] = []
    for body in bodies:
        for s in p.stmts_of(body):
            if isinstance(s, p.If):
                decided.append(s.cond)
            elif isinstance(s, p.Assign):
                assigned.append((s.target, s.value))
        for e in p.exprs_of(body):
            if isinstance(e, p.Bin) and e.op in _LOGIC:
                decided += [e.left, e.right]
            elif isinstance(e, p.Call) and e.args:
                decided.append(e.args[0])
    return decided, assigned


# ---- check 5: reads of possibly invalid headers ------------------------------------------------


class _Unknown:
    def __repr__(self) -> str:
        return "?"


UNKNOWN = _Unknown()


@dataclass(frozen=True, slots=True)
class _Not:
    """A location known to differ from each of ``values`` (the else-branch of ``x == K``)."""

    values: frozenset[object]


@dataclass(frozen=True, slots=True)
class _St:
    """An abstract state: the valid headers (paths in the headers struct) and the locations
    known to hold a constant ("metadata_t.nfc_cut" → 2)."""

    valid: frozenset[str]
    consts: frozenset[tuple[str, object]]

    def get(self, key: str) -> object:
        for k, v in self.consts:
            if k == key:
                return v
        return UNKNOWN

    def set(self, key: str, value: object) -> _St:
        rest = frozenset(kv for kv in self.consts if kv[0] != key)
        return _St(self.valid, rest | {(key, value)} if value is not UNKNOWN else rest)

    def with_valid(self, header: str, valid: bool) -> _St:
        return _St(self.valid | {header} if valid else self.valid - {header}, self.consts)


_States = dict[_St, tuple[str, ...]]  # state → one parser path that reaches it


def _merge(into: _States, more: _States) -> None:
    for st, trace in more.items():
        into.setdefault(st, trace)


_PARSER_ERROR_KEYS = {"v1model": ("standard_metadata_t.parser_error", "error.NoError", "error.PacketTooShort",
                                  "error.NoMatch"),
                      "tna": ("ingress_intrinsic_metadata_from_parser_t.parser_err", 0, 2, 1)}


@dataclass
class _Read:
    fields: list[str]
    trace: tuple[str, ...]
    write: bool


class _Validity:
    """The abstract interpretation of one dataflow (parser, then controls)."""

    def __init__(self, lint: _Lint, flow: list[p.Parser | p.Control]) -> None:
        self.lint = lint
        self.flow = flow
        first = flow[0]
        hdr = first.params[1].type if len(first.params) > 1 else None
        self.hdr_type = hdr.name if isinstance(hdr, p.TypeName) else ""
        self.found: dict[tuple[str, str, bool], _Read] = {}
        self.roots: dict[str, str] = {}
        self.scope = _Scope("", len(lint.prog.decls))
        self.exited: _States = {}
        self.block = ""
        self.relevant: frozenset[str] = frozenset()
        # the live locations after each statement of a control's apply block (by id: a node
        # the generator shares between places has the union), and after the block (``exit``)
        self.live_after: dict[int, frozenset[str]] = {}
        self.exit_live: frozenset[str] = frozenset()
        self.visits = 0  # states run through a statement: the analysis's work, for tests

    def run(self) -> None:
        if not self.hdr_type or self.lint.composite(self.hdr_type) is None:
            return
        self.relevant = self._relevant()
        live_in = self._liveness()
        states: _States = {_St(frozenset(), frozenset()): ()}
        for i, d in enumerate(self.flow):
            self.enter(d)
            self.exit_live = live_in[i + 1]
            if isinstance(d, p.Parser):
                states = self.project(self.parser(d, states), self.exit_live)
            else:
                self.exited = {}
                states = self.stmts(d.apply, states, "apply", project=True)
                _merge(states, self.exited)
        for (where, header, write), r in sorted(self.found.items()):
            shown = ", ".join(r.fields[:3]) + (f" and {len(r.fields) - 3} more field(s)" if len(r.fields) > 3 else "")
            verb = ("is " if len(r.fields) == 1 else "are ") + ("written" if write else "read")
            self.lint.err("P4L051" if write else "P4L050", where, header,
                          f"header {header} must be valid where {shown} {verb}, not invalid on a path "
                          f"(parser: {' → '.join(r.trace)})", "warning" if write else "error")

    def enter(self, d: p.Parser | p.Control) -> None:
        kind = "parser" if isinstance(d, p.Parser) else "control"
        self.block = f"{kind} {d.name}"
        self.scope = self.lint.block_scope(d, len(self.lint.prog.decls))
        self.roots = {prm.name: prm.type.name for prm in d.params if isinstance(prm.type, p.TypeName)}

    def _relevant(self) -> frozenset[str]:
        """The locations whose known constant can decide something: those read in a condition
        (``if``, ``select``, an operand of ``&&`` / ``||``, a call's first argument: v1model's
        checksum ``condition``), and those assigned into a relevant location.  A constant
        anywhere else never prunes a branch, so the states do not keep it: states that differ
        only there are one state (without this, every ``meta.nfc_rd_x = 0; if (...) meta.nfc_rd_x
        = hdr.x.f;`` doubles the states, and they multiply along a long pipeline)."""
        seeds: set[str] = set()
        edges: dict[str, set[str]] = {}
        for d in self.flow:
            self.enter(d)
            decided, assigned = _decisions(d)
            for e in decided:
                seeds |= self._keys(e)
            for target, value in assigned:
                while isinstance(target, p.Slice):
                    target = target.base
                loc = self.loc(target)
                if loc is not None and loc[0] == "loc":
                    edges.setdefault(loc[1], set()).update(self._keys(value))
        relevant: set[str] = set()
        work = list(seeds)
        while work:
            key = work.pop()
            if key not in relevant:
                relevant.add(key)
                work += edges.get(key, ())
        return frozenset(relevant)

    def _keys(self, e: p.Expr) -> set[str]:
        """The tracked locations ``e`` reads."""
        locs = (self.loc(x) for x in p.subexprs(e) if isinstance(x, p.Member | p.Path))
        return {loc[1] for loc in locs if loc is not None and loc[0] == "loc"}

    def _liveness(self) -> list[frozenset[str]]:
        """The locations live at the start of each block of the flow (and, last, after it),
        filling ``live_after``: a location is live where a later statement may read it
        before writing it.  A constant of a dead location cannot decide anything any more,
        so ``stmts`` drops it from the states after each statement (``project``): the states
        then differ only in what is still to be read, and do not multiply stage by stage
        (a stage's table results, ``meta.t__port``, are read in that stage only)."""
        live = [frozenset[str]() for _ in range(len(self.flow) + 1)]
        for i in reversed(range(len(self.flow))):
            d = self.flow[i]
            self.enter(d)
            if isinstance(d, p.Parser):  # conservatively: everything the parser reads, and what comes after
                live[i] = live[i + 1] | {k for s in d.states for e in (*p.exprs_of(s.body), *s.select)
                                         for k in self._keys(e)}
            else:
                self.exit_live = live[i + 1]
                live[i] = self._live_stmts(d.apply, live[i + 1])
        return live

    def _live_stmts(self, stmts: tuple[p.Stmt, ...], after: frozenset[str]) -> frozenset[str]:
        for s in reversed(stmts):
            self.live_after[id(s)] = self.live_after.get(id(s), frozenset()) | after
            after = self._live_stmt(s, after)
        return after

    def _live_stmt(self, s: p.Stmt, after: frozenset[str]) -> frozenset[str]:
        """The locations live before ``s`` given those live after it."""
        match s:
            case p.Assign():
                target = s.target
                while isinstance(target, p.Slice):
                    target = target.base
                loc = self.loc(target)  # every write replaces what was known (a slice's base becomes unknown)
                kept = after - {loc[1]} if loc is not None and loc[0] == "loc" else after
                return kept | self._gen(s.value)
            case p.CallStmt():
                return after | self._gen(s.call)
            case p.If():
                return self._live_stmts(s.then, after) | self._live_stmts(s.orelse, after) | self._gen(s.cond)
            case p.Exit():
                return self.exit_live
            case p.Comment():
                return after
            case _:
                assert_never(s)

    def _gen(self, e: p.Expr, seen: frozenset[str] = frozenset()) -> set[str]:
        """The tracked locations evaluating ``e`` may read, through the actions of the
        tables it applies and of the actions it calls (all of them, none killed)."""
        keys = self._keys(e)
        for c in p.subexprs(e):
            if not isinstance(c, p.Call):
                continue
            bodies: list[tuple[str, p.Expr | None]] = []
            if isinstance(c.target, p.Member) and isinstance(c.target.base, p.Path) and c.target.field == "apply" \
                    and c.target.base.name in self.scope.tables:
                t = self.scope.tables[c.target.base.name]
                bodies = [(a, None) for a in t.actions] + [("", k.expr) for k in t.keys]
            elif isinstance(c.target, p.Path) and c.target.name in self.scope.actions:
                bodies = [(c.target.name, None)]
            for name, key in bodies:
                if key is not None:
                    keys |= self._keys(key)
                elif name in self.scope.actions and name not in seen:
                    for x in p.exprs_of(self.scope.actions[name].body):
                        keys |= self._gen(x, seen | {name})
        return keys

    def project(self, states: _States, live: frozenset[str]) -> _States:
        """``states`` without the constants of locations not in ``live`` (merged where they
        were all that differed; the first state's parser path is kept); all of them if exact."""
        if self.lint.exact:
            return states
        out: _States = {}
        for st, trace in states.items():
            if any(k not in live for k, _ in st.consts):
                st = _St(st.valid, frozenset(kv for kv in st.consts if kv[0] in live))
            out.setdefault(st, trace)
        return out

    def put(self, st: _St, key: str, value: object) -> _St:
        """``st`` with location ``key`` holding ``value``, if the location is relevant (or exact)."""
        return st.set(key, value) if key in self.relevant or self.lint.exact else st

    # -- locations --

    def loc(self, e: p.Expr) -> tuple[str, str, str] | None:
        """("field", header, field) | ("header", header, "") | ("loc", key, "") for an l-value
        rooted at a parameter; header paths are relative to the headers struct, keys of other
        locations are "<parameter type>.<path>"."""
        chain: list[str] = []
        while isinstance(e, p.Member):
            chain.append(e.field)
            e = e.base
        if not isinstance(e, p.Path) or e.name not in self.roots:
            return None
        chain.reverse()
        root = self.roots[e.name]
        in_hdr = root == self.hdr_type
        cur: str | None = root
        path: list[str] = []
        for i, f in enumerate(chain):
            comp = self.lint.composite(cur) if cur else None
            if comp is None:
                return None
            kind, fields = comp
            if kind == "header" and in_hdr and path:
                return ("field", ".".join(path), f) if i == len(chain) - 1 else None
            if f not in fields:
                return None
            path.append(f)
            ft = fields[f]
            cur = ft.name if isinstance(ft, p.TypeName) else None
        last = self.lint.composite(cur) if cur else None
        if in_hdr and path and last is not None and last[0] == "header":
            return ("header", ".".join(path), "")
        return ("loc", f"{root}.{'.'.join(path)}", "")

    def _note(self, write: bool, label: str, header: str, field_: str, trace: tuple[str, ...]) -> None:
        hdr_param = next((n for n, t in self.roots.items() if t == self.hdr_type), "hdr")
        shown = f"{hdr_param}.{header}"
        r = self.found.setdefault((f"{self.block} › {label}", shown, write), _Read([], trace, write))
        if f"{shown}.{field_}" not in r.fields:
            r.fields.append(f"{shown}.{field_}")

    # -- expressions --

    def eval(self, e: p.Expr, st: _St, trace: tuple[str, ...], label: str) -> list[tuple[_St, object]]:
        """The value of ``e`` in ``st`` (UNKNOWN when not a known constant), with the states
        its side effects (tables, actions) lead to; reads of invalid headers are noted."""
        match e:
            case p.Const():
                return [(st, bool(e.value) if e.width == 0 else e.value)]
            case p.Path():
                return [(st, self.const_value(e.name))]
            case p.Member():
                return self._member(e, st, trace, label)
            case p.Bin():
                out: list[tuple[_St, object]] = []
                for s1, lv in self.eval(e.left, st, trace, label):
                    if (e.op == "&&" and lv is False) or (e.op == "||" and lv is True):
                        out.append((s1, lv))  # short-circuit: the right operand is not evaluated
                        continue
                    out += [(s2, _binop(e.op, lv, rv)) for s2, rv in self.eval(e.right, s1, trace, label)]
                return out
            case p.Un():
                return [(s1, (not v) if e.op == "!" and isinstance(v, bool) else UNKNOWN)
                        for s1, v in self.eval(e.operand, st, trace, label)]
            case p.Cast():
                return [(s1, _cast_value(e.type, v)) for s1, v in self.eval(e.operand, st, trace, label)]
            case p.Slice():
                return [(s1, (v >> e.lo) & ((1 << (e.hi - e.lo + 1)) - 1) if isinstance(v, int) and _is_int(v)
                         else UNKNOWN) for s1, v in self.eval(e.base, st, trace, label)]
            case p.Call():
                return self.call(e, st, trace, label)
            case p.ListExpr():
                return [(s1, UNKNOWN) for s1 in self.eval_all(e.items, st, trace, label)]
        return [(st, UNKNOWN)]

    def eval_all(self, items: tuple[p.Expr, ...], st: _St, trace: tuple[str, ...], label: str) -> list[_St]:
        states = [st]
        for item in items:
            states = list(dict.fromkeys(s1 for s0 in states for s1, _ in self.eval(item, s0, trace, label)))
        return states

    def const_value(self, name: str) -> object:
        if name in self.scope.params or name in self.scope.instances:
            return UNKNOWN
        entry = self.lint.decls.get(name)
        if entry is not None:
            d = entry[1]
            if isinstance(d, p.ConstDecl) and isinstance(d.value, p.Const):
                return bool(d.value.value) if d.value.width == 0 else d.value.value
            return UNKNOWN
        return self.lint.i_consts.get(name, UNKNOWN)

    def _member(self, e: p.Member, st: _St, trace: tuple[str, ...], label: str) -> list[tuple[_St, object]]:
        if isinstance(e.base, p.Path) and e.base.name not in self.roots \
                and f"{e.base.name}.{e.field}" in self.lint.i_enum_members:
            return [(st, f"{e.base.name}.{e.field}")]
        loc = self.loc(e)
        if loc is None:  # t.apply().hit, a method, ...
            return [(s1, UNKNOWN) for s1, _ in self.eval(e.base, st, trace, label)]
        kind, key, field_ = loc
        if kind == "field" and key not in st.valid:
            self._note(False, label, key, field_, trace)
        return [(st, st.get(key) if kind == "loc" else UNKNOWN)]

    # -- calls --

    def call(self, c: p.Call, st: _St, trace: tuple[str, ...], label: str) -> list[tuple[_St, object]]:
        target = c.target
        if isinstance(target, p.Member):
            loc = self.loc(target.base)
            if loc is not None and loc[0] == "header":
                if target.field == "isValid":
                    return [(st, loc[1] in st.valid)]
                if target.field in ("setValid", "setInvalid"):
                    return [(st.with_valid(loc[1], target.field == "setValid"), UNKNOWN)]
            base = target.base
            if isinstance(base, p.Path) and base.name in self.scope.tables and target.field == "apply":
                return [(s1, UNKNOWN) for s1 in self.apply_table(self.scope.tables[base.name], st, trace, label)]
        elif isinstance(target, p.Path) and target.name in self.scope.actions:
            action = self.scope.actions[target.name]
            out: _States = {}
            for s0 in self.eval_all(c.args, st, trace, label):
                _merge(out, self.stmts(action.body, {s0: trace}, f"action {action.name}, called from {label}"))
            return [(s1, UNKNOWN) for s1 in out]
        return self._extern_call(c, st, trace, label)

    def _extern_call(self, c: p.Call, st: _St, trace: tuple[str, ...], label: str) -> list[tuple[_St, object]]:
        found = self.lint.signature(c, self.scope)
        n = len(c.args)
        sig = next((s for s in found[1] if sum(not q.optional for q in s.params) <= n <= len(s.params)), None) \
            if found else None
        dirs = [q.direction for q in sig.params] if sig else ["in"] * n
        # v1model's update_checksum / verify_checksum: the other arguments matter only if condition holds
        guarded = bool(sig and sig.params and sig.params[0].name == "condition")
        states: list[tuple[_St, object]] = [(st, UNKNOWN)]
        for i, arg in enumerate(c.args):
            direction = dirs[i] if i < len(dirs) else "in"
            nxt: list[tuple[_St, object]] = []
            for s0, cond in states:
                if guarded and i > 0 and cond is False:
                    nxt.append((s0, cond))
                    continue
                results = self.eval(arg, s0, trace, label) if direction != "out" else [(s0, UNKNOWN)]
                for s1, v in results:
                    if direction in ("out", "inout"):
                        s1 = self.write(arg, s1, UNKNOWN, trace, label)
                    nxt.append((s1, v if guarded and i == 0 else cond))
            states = nxt
        return [(s, UNKNOWN) for s in dict.fromkeys(s for s, _ in states)]

    def write(self, target: p.Expr, st: _St, value: object, trace: tuple[str, ...], label: str) -> _St:
        while isinstance(target, p.Slice):
            target, value = target.base, UNKNOWN
        loc = self.loc(target)
        if loc is None:
            return st
        kind, key, field_ = loc
        if kind == "field" and key not in st.valid:
            self._note(True, label, key, field_, trace)
        return self.put(st, key, value) if kind == "loc" else st

    def apply_table(self, t: p.Table, st: _St, trace: tuple[str, ...], label: str) -> list[_St]:
        out: _States = {}
        for s0 in self.eval_all(tuple(k.expr for k in t.keys), st, trace, f"table {t.name} (key), applied at {label}"):
            for name in t.actions:
                action = self.scope.actions.get(name)
                if action is not None:
                    _merge(out, self.stmts(action.body, {s0: trace}, f"action {name}, run by table {t.name}"))
        return list(out)

    # -- statements --

    def stmts(self, stmts: tuple[p.Stmt, ...], states: _States, base: str, note: str = "",
              project: bool = False) -> _States:
        """Run ``stmts``; ``base`` and the latest comment name the place in findings.
        ``project``: ``stmts`` are (part of) a control's apply block, whose live locations
        are known after each statement: the states keep the constants of those only."""
        for s in stmts:
            if not states:
                break
            if isinstance(s, p.Comment):
                note = s.text
                continue
            states = self.stmt(s, states, base, note, project)
            if project:
                states = self.project(states, self.live_after[id(s)])
        return states

    def stmt(self, s: p.Stmt, states: _States, base: str, note: str = "", project: bool = False) -> _States:
        label = f"{base}: {note}" if note else base
        out: _States = {}
        self.visits += len(states)
        match s:
            case p.Assign():
                for st, trace in states.items():
                    for s1, v in self.eval(s.value, st, trace, label):
                        out.setdefault(self.write(s.target, s1, v, trace, label), trace)
            case p.CallStmt():
                for st, trace in states.items():
                    for s1, _ in self.eval(s.call, st, trace, label):
                        out.setdefault(s1, trace)
            case p.Exit():
                _merge(self.exited, self.project(states, self.exit_live))
            case p.If():
                then: _States = {}
                orelse: _States = {}
                for st, trace in states.items():
                    for s1, v in self.eval(s.cond, st, trace, label):
                        for truth, branch in ((True, then), (False, orelse)):
                            if v is not (not truth):
                                refined = _assume(self, s.cond, s1, truth) if v is UNKNOWN else s1
                                if refined is not None:
                                    branch.setdefault(refined, trace)
                out = self.stmts(s.then, then, base, note, project)
                _merge(out, self.stmts(s.orelse, orelse, base, note, project))
            case p.Comment():
                return states
        return out

    # -- the parser --

    def parser(self, d: p.Parser, entry: _States) -> _States:
        states = {s.name: s for s in d.states}
        packet = next((prm.name for prm in d.params if isinstance(prm.type, p.TypeName)
                       and prm.type.name == "packet_in"), "")
        accepted: _States = {}
        rejected: dict[tuple[_St, str], tuple[str, ...]] = {}
        seen: set[tuple[str, _St]] = set()
        work: list[tuple[str, _St, tuple[str, ...]]] = [("start", st, trace) for st, trace in entry.items()]
        while work:
            name, st, trace = work.pop()
            if (name, st) in seen:
                continue
            seen.add((name, st))
            trace = (*trace, name)
            if name == "accept":
                accepted.setdefault(st, trace)
                continue
            if name == "reject":
                rejected.setdefault((st, "NoMatch"), trace)
                continue
            state = states.get(name)
            if state is None:
                continue
            label = f"state {name}"
            current: _States = {st: trace}
            for s in state.body:
                op = _packet_op(s, packet)
                if op is not None and self._may_fail(op):
                    for s0, t0 in current.items():
                        rejected.setdefault((s0, "PacketTooShort"), (*t0, f"reject ({_show(op, 60)} fails)"))
                if op is not None and op.target == p.Member(p.Path(packet), "extract") and op.args:
                    loc = self.loc(op.args[0])
                    if loc is not None and loc[0] == "header":
                        current = {s0.with_valid(loc[1], True): t0 for s0, t0 in current.items()}
                        continue
                current = self.stmt(s, current, label)
            for s0, t0 in current.items():
                work += [(nxt, s1, t0) for nxt, s1 in self._transitions(state, s0, t0, packet, label, rejected)]
        out: _States = {}
        key, ok, short, nomatch = _PARSER_ERROR_KEYS["v1model" if self.lint.arch == "v1model" else "tna"]
        for st, trace in accepted.items():
            out.setdefault(self.put(st, key, ok), trace)
        for (st, why), trace in rejected.items():
            out.setdefault(self.put(st, key, short if why == "PacketTooShort" else nomatch), trace)
        return out

    def _may_fail(self, call: p.Call) -> bool:
        """An extract of a packet header or an advance can fail on a short packet; the
        architecture's own prefix (intrinsic metadata, PORT_METADATA_SIZE) cannot."""
        assert isinstance(call.target, p.Member)
        if call.target.field == "advance":
            return not (call.args and call.args[0] == p.Path("PORT_METADATA_SIZE"))
        loc = self.loc(call.args[0]) if call.args else None
        return loc is not None and loc[0] == "header"

    def _transitions(self, state: p.State, st: _St, trace: tuple[str, ...], packet: str, label: str,
                     rejected: dict[tuple[_St, str], tuple[str, ...]]) -> list[tuple[str, _St]]:
        if not state.select:
            return [(state.next, st)]
        for e in state.select:
            for sub in p.subexprs(e):
                if isinstance(sub, p.Call) and sub.target == p.Member(p.Path(packet), "lookahead"):
                    rejected.setdefault((st, "PacketTooShort"), (*trace, f"reject ({_show(sub, 60)} fails)"))
        evaluated: list[tuple[_St, list[object]]] = [(st, [])]
        for e in state.select:
            evaluated = [(s1, [*vals, v]) for s0, vals in evaluated for s1, v in self.eval(e, s0, trace, label)]
        out: list[tuple[str, _St]] = []
        for s0, vals in evaluated:
            for case in state.cases:
                verdicts = [_keyset_match(k, v) for k, v in zip(case.keys, vals, strict=False)]
                if any(v is False for v in verdicts):
                    continue
                s1: _St | None = s0
                for k, e in zip(case.keys, state.select, strict=False):
                    if isinstance(k, p.Const) and s1 is not None:
                        s1 = _assume(self, p.Bin("==", e, k), s1, True)
                if s1 is not None:
                    out.append((case.next, s1))
                if all(v is True for v in verdicts):
                    break
            else:
                rejected.setdefault((s0, "NoMatch"), (*trace, "reject (no select case matches)"))
        return out


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _cast_value(t: p.Type, v: object) -> object:
    if isinstance(t, p.Bool) and _is_int(v):
        return bool(v)
    if isinstance(t, p.Bits) and isinstance(v, int):
        return int(v) & ((1 << t.width) - 1)
    return UNKNOWN


def _packet_op(s: p.Stmt, packet: str) -> p.Call | None:
    if isinstance(s, p.CallStmt) and isinstance(s.call.target, p.Member) and s.call.target.base == p.Path(packet) \
            and s.call.target.field in ("extract", "advance"):
        return s.call
    return None


def _binop(op: str, lv: object, rv: object) -> object:
    if op == "&&":
        if lv is False or rv is False:
            return False
        return True if lv is True and rv is True else UNKNOWN
    if op == "||":
        if lv is True or rv is True:
            return True
        return False if lv is False and rv is False else UNKNOWN
    if op in ("==", "!=") and (isinstance(lv, _Not) or isinstance(rv, _Not)):
        excluded, other = (lv, rv) if isinstance(lv, _Not) else (rv, lv)
        assert isinstance(excluded, _Not)
        if other is UNKNOWN or isinstance(other, _Not) or other not in excluded.values:
            return UNKNOWN
        return op == "!="
    if lv is UNKNOWN or rv is UNKNOWN or isinstance(lv, _Not) or isinstance(rv, _Not):
        return UNKNOWN
    if op == "==":
        return lv == rv
    if op == "!=":
        return lv != rv
    if isinstance(lv, int) and isinstance(rv, int) and not isinstance(lv, bool) and not isinstance(rv, bool):
        match op:
            case "<":
                return lv < rv
            case "<=":
                return lv <= rv
            case ">":
                return lv > rv
            case ">=":
                return lv >= rv
    return UNKNOWN


def _keyset_match(k: p.Expr, v: object) -> object:
    if isinstance(k, p.Default):
        return True
    if v is UNKNOWN or isinstance(v, bool) or not isinstance(v, int):
        return UNKNOWN
    match k:
        case p.Const():
            return v == k.value
        case p.Mask() if isinstance(k.value, p.Const) and isinstance(k.mask, p.Const):
            return v & k.mask.value == k.value.value & k.mask.value
        case p.Range() if isinstance(k.lo, p.Const) and isinstance(k.hi, p.Const):
            return k.lo.value <= v <= k.hi.value
    return UNKNOWN


def _assume(flow: _Validity, cond: p.Expr, st: _St, truth: bool) -> _St | None:
    """``st`` refined by ``cond`` being ``truth``; None when that cannot be."""
    match cond:
        case p.Un(op="!"):
            return _assume(flow, cond.operand, st, not truth)
        case p.Bin(op="&&") if truth:
            s1 = _assume(flow, cond.left, st, True)
            return _assume(flow, cond.right, s1, True) if s1 is not None else None
        case p.Bin(op="||") if not truth:
            s1 = _assume(flow, cond.left, st, False)
            return _assume(flow, cond.right, s1, False) if s1 is not None else None
        case p.Bin(op="==" | "!="):
            eq = truth if cond.op == "==" else not truth
            for a, b in ((cond.left, cond.right), (cond.right, cond.left)):
                loc = flow.loc(a)
                known = _static(flow, b)
                if loc is not None and loc[0] == "loc" and known is not UNKNOWN and not isinstance(known, _Not):
                    return _assume_eq(flow, a, loc[1], known, eq, st)
        case p.Path() | p.Member():
            loc = flow.loc(cond)
            if loc is not None and loc[0] == "loc":
                return _assume_eq(flow, cond, loc[1], True, truth, st)
    found = _static(flow, cond, st)
    if isinstance(found, bool) and found != truth:
        return None
    return st


def _assume_eq(flow: _Validity, e: p.Expr, key: str, value: object, eq: bool, st: _St) -> _St | None:
    """``st`` refined by location ``key`` (expression ``e``) being (eq) or not being ``value``."""
    if key not in flow.relevant and not flow.lint.exact:
        return st
    have = st.get(key)
    if isinstance(have, _Not):
        if eq:
            return None if value in have.values else st.set(key, value)
        return st.set(key, _Not(have.values | {value}))
    if have is not UNKNOWN:
        return st if (have == value) == eq else None
    if eq:
        return st.set(key, value)
    t = flow.lint.quiet_type(e, flow.scope)
    if t.kind == "bool" and isinstance(value, bool):
        return st.set(key, not value)
    if t.kind == "bit" and t.width == 1 and value in (0, 1) and not isinstance(value, bool):
        return st.set(key, 1 - value)
    return st.set(key, _Not(frozenset({value})))


def _static(flow: _Validity, e: p.Expr, st: _St | None = None) -> object:
    """A value known without reading headers: literals, named constants, enum members, and
    (given a state) tracked locations and validity."""
    match e:
        case p.Const():
            return bool(e.value) if e.width == 0 else e.value
        case p.Path():
            return flow.const_value(e.name)
        case p.Member() if isinstance(e.base, p.Path) and f"{e.base.name}.{e.field}" in flow.lint.i_enum_members \
                and e.base.name not in flow.roots:
            return f"{e.base.name}.{e.field}"
        case p.Member() if st is not None:
            loc = flow.loc(e)
            return st.get(loc[1]) if loc is not None and loc[0] == "loc" else UNKNOWN
        case p.Call() if st is not None and isinstance(e.target, p.Member) and e.target.field == "isValid":
            loc = flow.loc(e.target.base)
            return loc[1] in st.valid if loc is not None and loc[0] == "header" else UNKNOWN
        case p.Bin(op="==" | "!=" | "&&" | "||" | "<" | "<=" | ">" | ">=") if st is not None:
            return _binop(e.op, _static(flow, e.left, st), _static(flow, e.right, st))
        case p.Un(op="!") if st is not None:
            v = _static(flow, e.operand, st)
            return (not v) if isinstance(v, bool) else UNKNOWN
    return UNKNOWN
