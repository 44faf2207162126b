"""Pass ``check-server-fit``: the servers must have the memory, cores and link bandwidth the
placement asks of them.

Precondition: resolved targets and a placement (``partition``).  The partitioner only
places a stage where its target *can* run it; whether the servers can carry it at the
deployment's ``rate`` is this pass's question, answered from the figures of
``compiler.server_load`` (memory per server, cores and link summed over the servers that
carry traffic: every server with ``shard by`` or without a switch, else the first alone).
Each resource that falls short is one E081 at what uses most of it — the largest server
table, the costliest server stage, the deployment for the link — with notes that say how
much is needed and available and what would fit.  With ``--allow-overcommit``
(``Compilation.allow_overcommit``) the same findings are warnings W081 and the build goes
on.  Without a server the pass does nothing.

Before: ``table flows { ... size = 4G; }`` (32-bit key, 128-bit value) on one ``box`` of 64 GiB
After:  ``error[E081]: table 'flows' does not fit in server memory: the server tables need
411.1 GiB, a box server has 64.0 GiB ...`` (``tests/corpus/server_memory.nfp``)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from compiler import ir
from compiler.analysis import stage_units
from compiler.explain import max_entries
from compiler.passes.capabilities import can_run
from compiler.placement import Placement
from compiler.profiles import TargetSet, TargetSpec
from compiler.resources import entries_share, server_capacity, server_share_bytes, size_for_share
from compiler.server_load import Margin, Part, PartKind, ServerLoad, fmt_bytes, server_load, server_tables
from compiler.shard import sharded_tables
from lang.diagnostics import Diagnostics, Span

__all__ = ["OVERCOMMIT_FLAG", "check_server_fit"]

OVERCOMMIT_FLAG = "--allow-overcommit"


@dataclass(frozen=True, slots=True)
class _Finding:
    message: str
    span: Span
    notes: tuple[str, ...]
    related: tuple[tuple[Span, str], ...] = ()


def check_server_fit(prog: ir.Program, pl: Placement, ts: TargetSet, allow_overcommit: bool,
                     diags: Diagnostics) -> ServerLoad | None:
    """The server load of the placement; E081 (W081 when over-commitment is allowed) per resource short."""
    sharded = sharded_tables(prog, pl, ts)
    load = server_load(prog, pl, ts, sharded)
    if load is None:
        return None
    _table_caps(prog, pl, ts, load.spread, diags)
    for margin, explain in ((load.memory, _memory), (load.cores, _cores), (load.link, _link)):
        if margin.fits:
            continue
        f = explain(prog, load, ts)
        if allow_overcommit:
            diags.warning("W081", f.message, f.span, (*f.notes, f"built anyway: {OVERCOMMIT_FLAG}"), f.related)
        else:
            diags.error("E081", f.message, f.span,
                        (*f.notes, f"or build with {OVERCOMMIT_FLAG} to over-commit the servers anyway"), f.related)
    return load


def _table_caps(prog: ir.Program, pl: Placement, ts: TargetSet, over: Mapping[str, int], diags: Diagnostics) -> None:
    """W087 at a server table whose entries on a server are more than a server table holds (the
    profile's ``[memory]``): a data-plane state table is made at ``state_max`` entries (the
    forwarding cores insert into it and do not stop to grow it), and an insert into it full of
    live entries is refused; a control-plane table is one rte_hash of at most
    ``hash_max_entries`` slots kept below 7/8 full, and an add beyond is refused (FULL).  ``over``:
    over how many servers each split table spreads (``ServerLoad.spread``)."""
    srv = ts.server
    if srv is None or "state_max" not in srv.memory:
        return
    slots = int(srv.memory["hash_max_entries"])
    lo, hi = 0, slots  # the most entries a control-plane table takes: its capacity within the slots
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if server_capacity(mid) <= slots else (lo, mid - 1)
    for t in server_tables(prog, pl):
        # a server's entries: its share when the servers share the packets (data-plane state)
        # or a hash spreads the table's key fields (compiler/shard.py); a range may give one all
        servers = (ts.carrying if ts.sharded else 1) if t.is_state else over.get(t.name, 1)
        share, most = entries_share(t.size, servers), int(srv.memory["state_max"]) if t.is_state else lo
        if share <= most:
            continue
        where = f"on each of {servers}" if servers > 1 else "on a"
        why = ("the server makes it at that size, and an insert into it full of live entries is refused"
               if t.is_state else "one rte_hash, kept below 7/8 full, and an add beyond it is refused (FULL)")
        cap = " (make CFLAGS=\"-O2 -march=native -DNFC_TABLE_CAP=N\")" if t.is_state else ""
        diags.warning("W087", f"{'state ' if t.is_state else ''}table '{t.name}' holds at most {most:,} entries "
                      f"{where} {srv.name} server, not the {share:,} its size asks for: {why}", t.span,
                      (f"declare 'size = {size_for_share(most, servers)};' to say so, or shard it over more servers" +
                       (f", or build the server with a bigger cap{cap}" if t.is_state else ""),))


def _short(m: Margin, shown: str) -> str:
    return (f"needed {shown}: {_amount(m, m.needed)}, available {_amount(m, m.available)}, "
            f"short by {_amount(m, -m.headroom)}")


def _amount(m: Margin, x: float) -> str:
    if m.unit == "bytes":
        return fmt_bytes(int(x))
    return f"{x:,.2f} {m.unit}"


def _users(m: Margin, title: str) -> list[str]:
    """The three largest users (none when one user is all of it: the message names it)."""
    if len(m.parts) < 2:
        return []
    return [f"{title}: " + ", ".join(f"{p.what} {_amount(m, p.amount)}" for p in m.parts[:3])]


def _override(prog: ir.Program, server: str, prop: str) -> str:
    if server in prog.targets:
        return f"'{prop};' in target '{server}'"
    return f"a target derived from {server} with '{prop};'"


def _rate(pps: float) -> str:
    return f"{pps / 1e6:,.6g} Mpps"


def _fitting_rate(load: ServerLoad, m: Margin) -> str:
    """The highest rate (rounded down to 10 Kpps) at which ``m`` fits: needs grow with the rate."""
    mpps = math.floor(load.rate_pps * m.available / m.needed / 1e4) / 100
    return f"it would fit at a rate <= {mpps:,.2f} Mpps"


def _more_servers(m: Margin, load: ServerLoad) -> str:
    """"with N servers like S in the deployment's 'servers' list, or " (nothing when S has none of ``m``)."""
    per_server = m.available / load.servers
    if per_server <= 0:
        return ""
    n = math.ceil(m.needed / per_server)
    if load.unsharded:  # more servers help only once the switch spreads the packets over them
        return (f"with 'shard by' in the deployment and {n} servers like {load.server.name} in its 'servers' "
                "list (without it the first server gets every packet), or ")
    return f"with {n} servers like {load.server.name} in the deployment's 'servers' list, or "


def _stage_of(prog: ir.Program, table: str) -> ir.Stage | None:
    return next((s for s in prog.stages.values() for u in stage_units(prog, s) if table in u.tables), None)


# ---- memory ---------------------------------------------------------------------------------


def _memory(prog: ir.Program, load: ServerLoad, ts: TargetSet) -> _Finding:
    m, srv = load.memory, load.server
    top = m.parts[0]
    t = prog.tables[top.name]
    msg = (f"table '{t.name}' does not fit in server memory: the server tables need {fmt_bytes(int(m.needed))}, "
           f"a {srv.name} server has {fmt_bytes(int(m.available))} (this table alone needs "
           f"{fmt_bytes(int(top.amount))}: {t.size} entries, {t.match} match, {t.key_bits}-bit key, "
           f"{t.value_bits}-bit value)")
    notes = [_short(m, "on each server, which holds every server table in full (a split one: its share)"),
             *_users(m, "largest")]
    fit = _max_server_entries(t, srv, int(m.available - (m.needed - top.amount)), load.spread.get(t.name, 1))
    if fit > 0:
        notes.append(f"table '{t.name}' would fit with size <= {fit} entries")
    gib = math.ceil(m.needed / 2**30)
    notes.append(f"or servers with at least {gib} GiB ({_override(prog, srv.name, f'memory = {gib}GiB')})")
    stage, sw = _stage_of(prog, t.name), ts.switch
    if sw is not None and stage is not None and not t.hints.cache and can_run(prog, stage, sw, True):
        room = max_entries(t, sw)
        if room >= t.size:
            notes.append(f"or place it on the switch ('pin = switch;'): alone on {sw.name} it fits up to {room} "
                         "entries")
    return _Finding(msg, t.span, tuple(notes))


def _max_server_entries(t: ir.Table, srv: TargetSpec, budget: int, servers: int) -> int:
    """The largest entry count of ``t`` whose server copy (its share, spread over ``servers``)
    fits in ``budget`` bytes."""
    if server_share_bytes(replace(t, size=0), srv, servers) > budget:
        return 0
    lo, hi = 0, t.size
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if server_share_bytes(replace(t, size=mid), srv, servers) <= budget else (lo, mid - 1)
    return lo


# ---- cores ----------------------------------------------------------------------------------


def _cores(prog: ir.Program, load: ServerLoad, ts: TargetSet) -> _Finding:
    m, srv = load.cores, load.server
    top = m.parts[0]
    subject, span = _core_subject(prog, top)
    ns = top.amount / (load.rate_pps / 1e9)
    msg = (f"{subject} does not fit the server cores: at {_rate(load.rate_pps)} the server part needs "
           f"{m.needed:,.2f} cores, the deployment has {m.available:g} ({load.servers} x {srv.name}); "
           f"{top.what} alone needs {top.amount:,.2f} ({ns:.1f} ns per offered packet)")
    cores = math.ceil(m.needed / load.servers)
    notes = [_short(m, f"at {_rate(load.rate_pps)}"), *_users(m, "costliest"), _fitting_rate(load, m),
             f"or {_more_servers(m, load)}servers of at least {cores} cores "
             f"({_override(prog, srv.name, f'cores = {cores}')})",
             *_switch_help(prog, m.parts, ts)]
    related = _deployment_note(prog, load)
    return _Finding(msg, span, tuple(notes), related)


def _core_subject(prog: ir.Program, top: Part) -> tuple[str, Span]:
    """What the message names: the stage, or the pipeline whose packet I/O costs most."""
    if top.kind is PartKind.MISSES:
        stage = _stage_of(prog, top.name)
        if stage is not None:
            return f"stage '{stage.name}' (misses of the switch cache of '{top.name}')", stage.span
    return top.what, top.span


def _deployment_note(prog: ir.Program, load: ServerLoad) -> tuple[tuple[Span, str], ...]:
    d = prog.deployment
    if d is None:
        return ()
    span = next((p.span for p in d.props if p.name == "rate"), d.span)
    return ((span, f"deployment '{d.name}' offers {_rate(load.rate_pps)} to {load.servers} x "
                   f"{load.server.name}"),)


def _switch_help(prog: ir.Program, parts: tuple[Part, ...], ts: TargetSet) -> list[str]:
    """Ways to send fewer packets to the servers: a switch cache for the tables of the
    costliest server stages the switch can run, or a switch in front of a server-only build."""
    sw = ts.switch
    if sw is None:
        return ["or put a switch in front (--target tofino+dpdk): only the stages it cannot run reach the servers"]
    out: list[str] = []
    for p in parts:
        if p.kind is not PartKind.STAGE or not can_run(prog, prog.stages[p.name], sw, True):
            continue
        tables = [prog.tables[t] for u in stage_units(prog, prog.stages[p.name]) for t in u.tables]
        pinned = [t.name for t in tables if t.hints.pin == "server"]
        if pinned:
            out.append(f"or remove 'pin = server;' from table '{pinned[0]}' so stage '{p.name}' may run on {sw.name}")
            continue
        out += [f"or add 'cache = true;' to table '{t.name}' (stage '{p.name}'): the switch answers its hot entries "
                "and only misses reach the servers" for t in tables if not t.hints.cache]
    return out[:2]


# ---- link -----------------------------------------------------------------------------------


def _link(prog: ir.Program, load: ServerLoad, ts: TargetSet) -> _Finding:
    m, srv = load.link, load.server
    what = "the switch-server links" if load.behind_switch else "the servers' NICs"
    share = m.needed / (load.rate_pps * load.mean_packet_bytes * 8 / 1e9)
    who = "every packet reaches a server" if share >= 1 else f"{share:.1%} of the packets cross to the servers"
    subject, span = _link_subject(prog, m)
    msg = (f"{subject} does not fit {what}: at {_rate(load.rate_pps)} of {load.mean_packet_bytes:g}-byte packets "
           f"{who}: {m.needed:,.2f} Gbit/s, they carry {m.available:g} Gbit/s ({load.servers} x {srv.name})")
    gbps = math.ceil(m.needed / load.servers)
    notes = [_short(m, "each way"), *_users(m, "crossing" if load.behind_switch else "arriving"),
             _fitting_rate(load, m),
             f"or {_more_servers(m, load)}links of at least {gbps} Gbit/s per server "
             f"({_override(prog, srv.name, f'link = {gbps}Gbps')})",
             *_switch_help(prog, load.cores.parts, ts)]
    return _Finding(msg, span, tuple(notes))


def _link_subject(prog: ir.Program, m: Margin) -> tuple[str, Span]:
    """The deployment (its ``rate``) when there is one; the pipeline that crosses most otherwise."""
    d = prog.deployment
    if d is not None:
        return f"deployment '{d.name}'", d.span
    return m.parts[0].what, m.parts[0].span
