"""Pass ``check-ports``: every port a program names fits the switch's port number, and a
build with a switch and servers says which switch ports lead to the servers.

Precondition: resolved targets.  A constant ``forward(N)`` names a port some pipeline takes
(any other is dropped as ``no_such_port``, compiler/forward_ports.py): E084 otherwise, on every
target.  A switch profile's ``port_bits`` (9 on Tofino: ``PortId_t`` is ``bit<9>``) bounds the
pipelines' ``ports`` and the deployment's ``server_ports``; a larger number would be truncated
by the generated program (600 leaves on port 88), so it is E083 at its span.  With a switch and a server the
deployment must name at least one server port (else the switch has nowhere to send the
server's share: E083; a program without any deployment gets the first port after its
pipelines' with a warning, W083), and a server port may not also be a pipeline's ingress port.

Before: ``ports all = [0..600];`` builds, the TNA program takes port 88 for 600.  After:
``t.nfp:12:5: error[E083]: pipeline 'main' takes port 600 does not fit tofino1's 9-bit port numbers (0..511)``.
"""

from __future__ import annotations

from dataclasses import replace

from compiler import ir
from compiler.analysis import walk_expr, walk_stmts
from compiler.profiles import TargetSet
from compiler.resources import BUCKET_BITS
from lang.diagnostics import Diagnostics, Span

__all__ = ["check_ports"]


def check_ports(prog: ir.Program, targets: TargetSet, diags: Diagnostics) -> TargetSet:
    """``targets``, with the server port assumed when a program has no deployment (W083)."""
    _check_constant_forwards(prog, diags)
    sw = targets.switch
    if sw is None:
        return targets
    bits = int(sw.resources.get("port_bits", 9))
    top = (1 << bits) - 1
    where = prog.deployment.span if prog.deployment else Span(prog.file, 1, 1, 1, 1)

    def fits(port: int, span: Span, what: str) -> None:
        if not 0 <= port <= top:
            diags.error("E083", f"{what} {port} does not fit {sw.name}'s {bits}-bit port numbers (0..{top})", span,
                        notes=("the generated switch program would send it to another port",))

    for p in prog.pipelines:
        for _lo, hi in p.ports:  # ascending: the front end checks (E090)
            fits(hi, p.span, f"pipeline '{p.name}' takes port")
    for port in targets.server_ports:
        fits(port, where, "server port")
    if targets.server is None:
        return targets
    if not targets.server_ports and prog.deployment is None:  # a sketch without a deployment: say what is assumed
        port = max((hi for p in prog.pipelines for _lo, hi in p.ports), default=-1) + 1
        diags.warning("W083", f"no deployment names the switch ports wired to the servers: assuming port {port}, "
                      "the first port after the pipelines'", where)
        return replace(targets, server_ports=(port,))
    if not targets.server_ports:
        diags.error("E083", "the deployment must name the switch ports wired to the servers "
                    "(server_ports = [32..33];): the switch has nowhere to send the servers' share", where)
    _check_shard(prog, targets, where, diags)
    shared = sorted({port for port in targets.server_ports for p in prog.pipelines if p.has_port(port)})
    if shared:
        diags.error("E083", f"server port{'s' if len(shared) > 1 else ''} {', '.join(map(str, shared))} "
                    "also take a pipeline's packets: a port leads to a server or to the network, not both", where)
    return targets


def _check_shard(prog: ir.Program, targets: TargetSet, where: Span, diags: Diagnostics) -> None:
    """``shard by`` spreads the servers' share over every server port, one server each; its
    keys are read where the packet leaves the switch, so they are metadata (a header may be
    gone or changed there).  Several servers without it: only the first carries traffic."""
    shard = prog.deployment.shard if prog.deployment else None
    if shard is None:
        if targets.n_servers > 1:
            diags.warning("W084", f"{targets.n_servers} servers are declared, but without 'shard by' the switch "
                          f"sends every packet to the first server port ({targets.server_ports[0]})", where,
                          notes=("say which server a packet goes to: shard by hash(meta.key); or range(meta.key);",))
        return
    for key in shard.keys:
        for x in walk_expr(key):
            if not isinstance(x, ir.MetaField | ir.Const | ir.Unary | ir.Binary | ir.Slice | ir.Cast):
                diags.error("E060", "a shard key reads metadata and constants only: it is read where the packet "
                            "leaves the switch, where a header may be gone or rewritten", key.span,
                            notes=("copy the field into metadata in a stage before the cut (meta.k = h.f;)",))
                break
    if not any(isinstance(x, ir.MetaField) for k in shard.keys for x in walk_expr(k)):
        diags.error("E060", "shard by reads no metadata: every packet would go to the same server", shard.span)
    elif shard.method == "range" and (1 << shard.keys[0].width) < targets.n_servers:
        diags.error("E060", f"range(...) of a {shard.keys[0].width}-bit key has fewer values than the "
                    f"{targets.n_servers} servers: some would get no packet", shard.keys[0].span)
    if targets.n_servers > 1 << BUCKET_BITS:
        diags.error("E060", f"shard by over {targets.n_servers} servers: at most {1 << BUCKET_BITS} (the buckets "
                    "the switch steers by)", shard.span)
    if shard.method == "range" and shard.keys[0].width > 32:
        diags.error("E060", f"range(...) of a {shard.keys[0].width}-bit key: at most 32 bits "
                    "(hash(...) takes any)", shard.keys[0].span)
    if len(targets.server_ports) != targets.n_servers:
        diags.error("E083", f"shard by: {targets.n_servers} server{'s' if targets.n_servers > 1 else ''} but "
                    f"{len(targets.server_ports)} server port{'s' if len(targets.server_ports) != 1 else ''}: "
                    "each server takes one port, in order", shard.span)


def _check_constant_forwards(prog: ir.Program, diags: Diagnostics) -> None:
    """A constant ``forward(N)`` names one of the pipelines' ports: any other number would drop
    every packet there (``no_such_port``, compiler/forward_ports.py), certainly a mistake."""
    for stage in prog.stages.values():
        for s in walk_stmts(stage.body):
            if isinstance(s, ir.Forward) and isinstance(s.port, ir.Const) \
                    and not any(p.has_port(s.port.value) for p in prog.pipelines):
                diags.error("E084", f"forward to port {s.port.value}, which no pipeline takes", s.span,
                            notes=("a packet forwarded to a port outside every pipeline's `ports` is dropped "
                                   "(no_such_port)",))
