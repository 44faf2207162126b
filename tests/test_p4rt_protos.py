"""The p4runtime wheel's ``_pb2`` modules as ``build.py setup`` regenerates them for protobuf's
C implementation (tools/p4rt_protos.py): this process runs upb, the project forces the
pure-Python implementation nowhere, and representative P4Runtime messages serialize to the
same bytes as with the wheel's own modules under pure Python (kept in the venv by setup) — and
to the bytes the protobuf wire format gives by hand."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import text_format
from google.protobuf.internal import api_implementation
from p4.v1 import p4runtime_pb2

import emulator.switchmodel.server  # noqa: F401
import runtime.api  # noqa: F401  (the project's P4Runtime users loaded, as in any test run)
from tests.support import ROOT
from tools.p4rt_protos import LEGACY, MODULES, regenerate, serialized_descriptor

LEGACY_TREE = Path(sys.prefix) / LEGACY
needs_legacy = pytest.mark.skipif(not (LEGACY_TREE / "p4").is_dir(),
                                  reason="the wheel's original modules are kept by `python3 build.py setup`")

# (message type of p4.v1, text format): a write of every match kind, a read, arbitration, a
# packet-in, a pipeline config with a P4Info, an error status detail
MESSAGES = [
    ("WriteRequest", """device_id: 1 election_id { high: 0 low: 1 } atomicity: ROLLBACK_ON_ERROR
      updates { type: INSERT entity { table_entry { table_id: 39145070 priority: 0
        match { field_id: 1 exact { value: "\\x00\\x07" } }
        match { field_id: 2 lpm { value: "\\n\\x01\\x02\\x00" prefix_len: 24 } }
        action { action { action_id: 7 params { param_id: 1 value: "\\xac\\x10\\x05\\x05" } } } } } }
      updates { type: DELETE entity { table_entry { table_id: 5 priority: 10
        match { field_id: 1 ternary { value: "\\x0a" mask: "\\xff" } }
        match { field_id: 3 range { low: "\\x01" high: "\\x04\\x00" } } } } }"""),
    ("ReadRequest", 'device_id: 0 entities { table_entry { table_id: 5'
                    ' match { field_id: 1 exact { value: "\\x01" } } } }'
                    ' entities { counter_entry { counter_id: 9 index { index: 3 } } }'),
    ("StreamMessageRequest", "arbitration { device_id: 0 election_id { high: 1 low: 18446744073709551615 } }"),
    ("StreamMessageResponse", 'packet { payload: "\\x02\\x00\\x00\\x00\\x00\\x01"'
                              ' metadata { metadata_id: 1 value: "\\x03" } }'),
    ("SetForwardingPipelineConfigRequest", """device_id: 0 action: VERIFY_AND_COMMIT election_id { low: 1 }
      config { p4info { pkg_info { arch: "tna" }
        tables { preamble { id: 39145070 name: "Ingress.vrf_fib" alias: "vrf_fib" }
        match_fields { id: 1 name: "meta_vrf" bitwidth: 14 match_type: EXACT }
        match_fields { id: 2 name: "ipv4_dst" bitwidth: 32 match_type: LPM } action_refs { id: 7 } size: 49152 } }
        cookie { cookie: 42 } }"""),
    ("Error", 'canonical_code: 6 message: "an entry with this key already exists" space: "p4.v1"'),
]

SERIALIZE = """
import json, sys
from google.protobuf import text_format
from google.protobuf.internal import api_implementation
from p4.v1 import p4runtime_pb2
out = [text_format.Parse(text, getattr(p4runtime_pb2, kind)()).SerializeToString(deterministic=True).hex()
       for kind, text in json.load(sys.stdin)]
print(json.dumps({"impl": api_implementation.Type(), "module": p4runtime_pb2.__file__, "bytes": out}))
"""


def test_protobuf_runs_its_c_implementation():
    assert api_implementation.Type() == "upb"


def test_no_project_module_forces_pure_python_protobuf():
    """Only ``.venv-p4rt``'s independent client may (it pins old protobuf on purpose)."""
    forcing = re.compile(r"environ\S*\(\s*[\"']PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION")
    found = [str(p.relative_to(ROOT)) for d in ("lang", "compiler", "targets", "emulator", "runtime", "nfc", "tests")
             for p in (ROOT / d).rglob("*.py") if forcing.search(p.read_text())]
    assert found == []


def test_wire_bytes_follow_the_encoding_rules():
    """WriteRequest{device_id: 1 (field 1, varint), election_id (field 3) {low: 2 (field 2)}}:
    tag 0x08, 1; tag 0x1a, length 2, tag 0x10, 2."""
    req = p4runtime_pb2.WriteRequest(device_id=1)
    req.election_id.low = 2
    assert req.SerializeToString() == bytes([0x08, 0x01, 0x1A, 0x02, 0x10, 0x02])


@needs_legacy
def test_messages_are_byte_identical_to_the_wheels_modules_under_pure_python():
    env = dict(os.environ, PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION="python", PYTHONPATH=str(LEGACY_TREE))
    r = subprocess.run([sys.executable, "-c", SERIALIZE], input=json.dumps(MESSAGES), capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    old = json.loads(r.stdout)
    assert old["impl"] == "python" and old["module"].startswith(str(LEGACY_TREE))
    new = [text_format.Parse(text, getattr(p4runtime_pb2, kind)()).SerializeToString(deterministic=True).hex()
           for kind, text in MESSAGES]
    assert new == old["bytes"]
    for (kind, _text), data in zip(MESSAGES, old["bytes"], strict=True):  # and what one writes the other reads
        msg = getattr(p4runtime_pb2, kind).FromString(bytes.fromhex(data))
        assert msg.SerializeToString(deterministic=True).hex() == data


@needs_legacy
@pytest.mark.parametrize("rel", MODULES)
def test_regenerated_module_holds_the_wheels_descriptor(rel):
    module = importlib.import_module(rel.removesuffix(".py").replace("/", "."))
    assert module.DESCRIPTOR.serialized_pb == serialized_descriptor((LEGACY_TREE / rel).read_text())
    assert module.DESCRIPTOR.name == rel.removesuffix("_pb2.py") + ".proto"


@needs_legacy
def test_regenerating_is_idempotent_and_keeps_the_originals(tmp_path):
    site, venv = tmp_path / "site", tmp_path / "venv"
    for src in (LEGACY_TREE / "p4").rglob("*.py"):
        (site / src.relative_to(LEGACY_TREE)).parent.mkdir(parents=True, exist_ok=True)
        (site / src.relative_to(LEGACY_TREE)).write_text(src.read_text())
    assert regenerate(site, venv) == list(MODULES)
    assert regenerate(site, venv) == []
    for rel in MODULES:
        assert (venv / LEGACY / rel).read_text() == (LEGACY_TREE / rel).read_text()
    r = subprocess.run([sys.executable, "-c", SERIALIZE], input=json.dumps(MESSAGES[:1]), capture_output=True,
                       text=True, env=dict(os.environ, PYTHONPATH=str(site)), cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["impl"] == "upb" and json.loads(r.stdout)["module"].startswith(str(site))
