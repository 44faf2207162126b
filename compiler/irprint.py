"""A readable text form of the typed IR (``--dump-after PASS`` and golden files).

Every expression shows its width (``ipv4.ttl:8``), every declaration its source line.
"""

from __future__ import annotations

from typing import assert_never

from compiler import ir

__all__ = ["print_expr", "print_program"]


def print_expr(e: ir.Expr) -> str:
    match e:
        case ir.Const():
            return f"{e.value}w{e.width}" if e.width else ("true" if e.value else "false")
        case ir.HeaderField():
            return f"{e.inst}.{e.field}:{e.width}"
        case ir.MetaField():
            return f"meta.{e.name}:{e.width}"
        case ir.StdField():
            return f"std.{e.name}:{e.width}"
        case ir.Local():
            return f"${e.name}:{e.width}"
        case ir.Result():
            return f"{e.table}[hit].{e.field}:{e.width}"
        case ir.Valid():
            return f"valid({e.inst})"
        case ir.ChecksumOk():
            return f"checksum_ok({e.inst})"
        case ir.HeaderRef():
            return f"&{e.inst}"
        case ir.RegRead():
            return f"{e.reg}[{print_expr(e.index)}]"
        case ir.Hash() | ir.ExternCall():
            name = e.alg if isinstance(e, ir.Hash) else e.name
            return f"{name}({', '.join(print_expr(a) for a in e.args)})"
        case ir.CsumUpdate():
            return f"csum_update({print_expr(e.csum)}, {print_expr(e.old)}, {print_expr(e.new)})"
        case ir.CounterOp():
            return f"{e.obj}.{e.method}({print_expr(e.index)})"
        case ir.Unary():
            return f"{e.op}{print_expr(e.operand)}"
        case ir.Binary():
            return f"({print_expr(e.left)} {e.op} {print_expr(e.right)})"
        case ir.Slice():
            return f"{print_expr(e.base)}[{e.hi}:{e.lo}]"
        case ir.Cast():
            return f"bit<{e.width}>({print_expr(e.operand)})"
        case _:
            assert_never(e)


def _stmts(stmts: tuple[ir.Stmt, ...], indent: int) -> list[str]:
    return [line for s in stmts for line in _stmt(s, indent)]


def _stmt(s: ir.Stmt, n: int) -> list[str]:
    pad = "  " * n
    match s:
        case ir.Assign():
            return [f"{pad}{print_expr(s.target)} = {print_expr(s.value)};"]
        case ir.If():
            out = [f"{pad}if {print_expr(s.cond)} {{", *_stmts(s.then, n + 1)]
            if s.orelse:
                out += [f"{pad}}} else {{", *_stmts(s.orelse, n + 1)]
            return [*out, f"{pad}}}"]
        case ir.Lookup():
            return [f"{pad}lookup {s.table} {{", f"{pad}  hit {{", *_stmts(s.hit, n + 2), f"{pad}  }} miss {{",
                    *_stmts(s.miss, n + 2), f"{pad}  }}", f"{pad}}}"]
        case ir.Push():
            inits = ", ".join(f"{k} = {print_expr(v)}" for k, v in s.inits)
            return [f"{pad}push {s.inst} {{ {inits} }};"]
        case ir.Pop():
            return [f"{pad}pop {s.inst};"]
        case ir.Forward():
            return [f"{pad}forward({print_expr(s.port)});"]
        case ir.Drop() | ir.Punt():
            return [f"{pad}{'drop' if isinstance(s, ir.Drop) else 'punt'}({s.reason});"]
        case ir.Insert():
            vals = ", ".join(f"{k} = {print_expr(v)}" for k, v in s.values)
            tail = f" timeout {print_expr(s.timeout)}" if s.timeout is not None else ""
            return [f"{pad}insert {s.state} {{ {vals} }}{tail};"]
        case ir.Remove():
            return [f"{pad}remove {s.state};"]
        case ir.Refresh():
            return [f"{pad}refresh {s.state};"]
        case ir.Verify():
            return [f"{pad}verify({print_expr(s.cond)}, {s.reason});"]
        case ir.Eval():
            return [f"{pad}{print_expr(s.expr)};"]
        case ir.Extract():
            return [f"{pad}extract {s.inst};"]
        case _:
            assert_never(s)


def print_program(p: ir.Program) -> str:
    out: list[str] = [f"// IR of {p.file}"]
    out.append("packet { " + " ".join(f"{i.name}:{i.header}" for i in p.instances) + " }")
    out.append("metadata { " + " ".join(f"{f.name}:{f.width}" for f in p.metadata) + " }")
    for g in p.parsers.values():
        out.append(f"parser {g.name} {{  // line {g.span.line}")
        for st in g.states:
            sel = ", ".join(print_expr(e) for e in st.select)
            cases = " ".join(f"{[hex(v) + '&&&' + hex(m) for v, m in c.values]}->{c.target.kind}:{c.target.name}"
                             for c in st.cases)
            out += [f"  state {st.name} {{", *_stmts(st.stmts, 2),
                    f"    select({sel}) {cases} default->{st.default.kind}:{st.default.name}", "  }"]
        out.append("}")
    for t in p.tables.values():
        keys = ", ".join(f"{k.name}={print_expr(k.expr)}:{k.match}" for k in t.keys)
        vals = ", ".join(f"{v.name}:{v.width}" for v in t.values)
        kind = "state" if t.is_state else "table"
        out.append(f"{kind} {t.name} key({keys}) value({vals}) size={t.size} {t.hints}  // line {t.span.line}")
    for stage in p.stages.values():
        out += [f"stage {stage.name} {{  // line {stage.span.line}", *_stmts(stage.body, 1), "}"]
    for pl in p.pipelines:
        out.append(f"pipeline {pl.name} ports={list(pl.ports)} parser={pl.parser} stages={list(pl.stages)} "
                   f"traffic={pl.traffic}")
    return "\n".join(out) + "\n"
