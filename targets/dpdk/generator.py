"""The server generator, named ``dpdk``: writes ``OUT/server/`` (the generated ``nf.c`` and
``nfc_prog.h``, its packet model's sizes; the hand-written runtime ``nfc_rt.h`` / ``nfc_main.c``
and a Makefile using ``pkg-config libdpdk``)."""

from __future__ import annotations

import shutil
from pathlib import Path

from compiler.manifest import Plan
from compiler.placed import Placed
from compiler.server_load import spread
from compiler.shard import sharded_tables
from targets.c.printer import print_unit
from targets.dpdk.lower import lower_server
from targets.generator import GeneratorError

__all__ = ["COPIED", "RUNTIME", "DpdkGenerator"]

RUNTIME = Path(__file__).with_name("runtime")
# the hand-written runtime, copied verbatim next to the generated nf.c
COPIED = {"server_runtime_h": "nfc_rt.h", "server_burst_h": "nfc_burst.h", "server_control_h": "nfc_ctl.h",
          "server_lpm_h": "nfc_lpm.h", "server_state_h": "nfc_state.h", "server_main_c": "nfc_main.c",
          "server_tables_c": "nfc_tables.c", "server_values_c": "nfc_values.c", "server_state_c": "nfc_state.c",
          "server_lpm_c": "nfc_lpm.c", "server_control_c": "nfc_control.c", "server_entries_c": "nfc_entries.c",
          "server_hits_h": "nfc_hits.h", "server_hits_c": "nfc_hits.c", "server_esp_h": "nfc_esp.h",
          "server_esp_c": "nfc_esp.c", "server_objects_h": "nfc_objects.h", "server_objects_c": "nfc_objects.c",
          "server_acl_h": "nfc_acl.h", "server_acl_c": "nfc_acl.c", "server_pch_h": "nfc_pch.h",
          "server_bench_c": "nfc_bench.c", "server_makefile": "Makefile"}


class DpdkGenerator:
    name = "dpdk"
    what = "server"

    def emit(self, placed: Placed, plan: Plan, out: Path) -> dict[str, str]:
        folder = out / "server"
        folder.mkdir(parents=True, exist_ok=True)
        # a burst runs stage by stage only where the server's profile says so (its stage_major op):
        # the cost model prices it that way on the same condition
        srv = placed.targets.server
        if srv is None:
            raise GeneratorError("a build without a server target", None)
        # a table the shards split evenly is sized for this server's share, as the memory model prices it
        shares = spread(placed.program, placed.targets,
                        sharded_tables(placed.program, placed.placement, placed.targets))
        server = lower_server(placed.program, placed.placement, placed.bridges, srv.memory, shares,
                              software=plan.switch is None, stage_major="stage_major" in srv.ops)
        (folder / "nf.c").write_text(print_unit(server.nf))
        (folder / "nfc_prog.h").write_text(print_unit(server.sizes))
        for name in COPIED.values():
            shutil.copyfile(RUNTIME / name, folder / name)
        return {"server_c": "server/nf.c", "server_sizes_h": "server/nfc_prog.h",
                **{k: f"server/{v}" for k, v in COPIED.items()}}
