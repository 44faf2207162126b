"""A sharded deployment's shares moved between servers (issue 16: a server that stops
answering).  The switch program sends each share to its own server port unless its steering
tables (one per bridge, ``nfc_steer<cut>``, targets/p4/lower.py) say another; ``steer``
writes those, all in one P4Runtime batch.  ``fail_over`` moves a dead server's shares to a
survivor in the order that keeps every packet forwarded as the whole table says: the fleet
routes the shares' entries to the survivor, which gets the dead server's part of every split
table (from the goal state), and only then does the switch steer the shares to it.  What the dead
server held that packets wrote — state tables, registers, meters' buckets, replay windows,
port pools — cannot be restored: the report names it as lost."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from runtime.errors import ChannelError, InvalidEntry, RuntimeApiError
from runtime.fleet import ServerFleet
from runtime.p4runtime import Match, SwitchUpdate
from runtime.reconcile import Repair, reconcile

if TYPE_CHECKING:
    from runtime.api import Runtime

__all__ = ["FailOver", "check_servers", "fail_over", "steer", "steer_all"]


@dataclass
class FailOver:
    """What moving server ``dead``'s shares to server ``to`` took."""

    dead: int
    to: int
    restored: dict[str, Repair] = field(default_factory=dict)  # split tables: entries the survivor got
    lost: tuple[str, ...] = ()  # the dead server's data-plane state (tables, registers, meters)


def steer(rt: Runtime, share: int, server: int | None) -> None:
    """Send share ``share``'s packets to server ``server``'s port (None: back to its own)."""
    if rt.switch is None:
        raise ChannelError("steering is the switch's: connect its P4Runtime endpoint")
    shard = rt.plan.shard
    n = len(shard.shares) if shard is not None else 0
    if shard is None or not 0 <= share < n or (server is not None and not 0 <= server < n):
        raise InvalidEntry(f"steer share {share} to server {server}: the build has {n} shares and servers "
                           "(shard by)" if n else "steer: the build is not sharded (no shard by)")
    tables = [t for t, info in rt.switch.names["tables"].items() if info.get("steering")]
    match: dict[str, Match] = {"share": (share, None)}
    have = {t for t in tables if list(rt.switch.read(t, [(match, 0)]))}
    if server is None or server == share:  # back to its own port: the steering tables forget it
        updates = [SwitchUpdate("delete", t, match, {}) for t in tables if t in have]
    else:
        port = shard.shares[server].port
        updates = [SwitchUpdate("modify" if t in have else "add", t, match, {"port": port}) for t in tables]
    errors = [e for e in rt.switch.write(updates) if e is not None]
    if errors:
        raise errors[0]


def steer_all(rt: Runtime, server: int = 0) -> None:
    """Every share to one server: a sharded build run with one server program (``nfc run
    --live``), which the runtime gave every entry (one control channel, not a fleet)."""
    if rt.plan.shard is not None:
        for share in range(len(rt.plan.shard.shares)):
            if share != server:
                steer(rt, share, server)


def fail_over(rt: Runtime, dead: int, to: int) -> FailOver:
    """Move server ``dead``'s shares (its own, and any moved to it before) to server ``to``."""
    fleet = rt.server
    if not isinstance(fleet, ServerFleet) or rt.plan.shard is None:
        raise ChannelError("fail_over needs the sharded deployment's servers as one ServerFleet (shard by)")
    if fleet.split and rt.goal is None:
        raise ChannelError("fail_over restores the dead server's entries of split tables from the goal state: "
                           "connect with goal=PATH")
    shares = [s for s, owner in enumerate(fleet.route) if owner == dead]
    fleet.retire(dead, to)  # its entries now belong to `to`: the repair below puts them there
    report = FailOver(dead, to)
    try:
        if rt.goal is not None:
            report.restored = {t: sides["server"] for t, sides in reconcile(rt, servers_only=True).items()
                               if t in fleet.split and "server" in sides}
        for share in shares:
            steer(rt, share, to)
    except RuntimeApiError:
        fleet.down.discard(dead)  # not moved: the fleet routes as before
        fleet.route = [dead if s in shares else r for s, r in enumerate(fleet.route)]
        raise
    report.lost = rt.plan.shard.state
    return report


def check_servers(rt: Runtime) -> list[FailOver]:
    """One liveness round (call it from the control loop, every second say): each server that
    stopped answering and still has shares gets them moved to the next live server after it
    (``fail_over``); what each move took.  Nothing to move, or no server left: nothing done."""
    fleet = rt.server
    if not isinstance(fleet, ServerFleet) or rt.plan.shard is None:
        return []
    alive = fleet.alive()
    moves = []
    for dead, up in enumerate(alive):
        if up or dead in fleet.down or dead not in fleet.route:
            continue
        n = len(alive)
        to = next((k % n for k in range(dead + 1, dead + n) if alive[k % n]), None)
        if to is not None:
            moves.append(fail_over(rt, dead, to))
    return moves
