"""An independent P4Runtime client: p4runtime-shell (PyPI), run in its own virtualenv
(``.venv-p4rt``, made by ``build.py setup``) because it pins old protobuf.

usage: p4rt_shell_client.py ADDR P4INFO BIN COMMANDS.json
COMMANDS: [{"op": "insert"|"delete", "table": ..., "match": {...}, "action": ..., "params": {...}}]
Prints one JSON line per command: {"ok": true} or {"ok": false, "error": "..."}.
"""

import json
import sys

import p4runtime_sh.shell as sh

addr, p4info, binary, commands = sys.argv[1:5]
sh.setup(device_id=0, grpc_addr=addr, election_id=(0, 1), config=sh.FwdPipeConfig(p4info, binary), verbose=False)
with open(commands) as f:
    todo = json.load(f)
try:
    for cmd in todo:
        try:
            if cmd["op"] == "packet_out":
                po = sh.PacketOut(bytes.fromhex(cmd["payload"]), egress_port=str(cmd["port"]))
                po.send()
                print(json.dumps({"ok": True}), flush=True)
                continue
            if cmd["op"] == "read":
                n = sum(1 for _ in sh.TableEntry(cmd["table"]).read())
                print(json.dumps({"ok": True, "count": n}), flush=True)
                continue
            te = sh.TableEntry(cmd["table"])(action=cmd["action"]) if cmd.get("action") else \
                sh.TableEntry(cmd["table"])
            for k, v in cmd.get("match", {}).items():
                te.match[k] = v
            for k, v in cmd.get("params", {}).items():
                te.action[k] = v
            getattr(te, cmd["op"])()
            print(json.dumps({"ok": True}), flush=True)
        except Exception as e:
            print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"}), flush=True)
finally:
    sh.teardown()
