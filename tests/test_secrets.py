"""Keys are never shown (issue 15 item 4): a table value marked ``secret`` in the ``.nfp``
(the IPsec gateway's SA keys and salts) is carried to plan.json, and no message the runtime
makes about it — a refused call, a malformed entries file, a repr of an entry — holds the value
or the text it was given as.  The goal file, which must hold the keys to rebuild the data
planes, is owner-only."""

from __future__ import annotations

import stat

import pytest

from compiler.manifest import load_plan
from lang import Diagnostics
from lang.parser import parse_text
from lang.printer import print_module
from runtime.api import Runtime
from runtime.entries import EntriesError, EntrySpec, load_entries
from runtime.errors import InvalidEntry
from runtime.goal import GoalStore
from tests.support import build_example, compile_file

KEY = 0x2B7E151628AED2A6ABF7158809CF4F3C  # RFC 3686's AES-128 test key: digits easy to look for
TOO_WIDE = (1 << 128) | KEY


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = build_example("examples/ipsec_gateway.nfp", "tofino+dpdk", "--no-verify")
    return out


def _shows(text: str, value: int) -> bool:
    return any(form in text.lower() for form in (str(value), f"{value:x}", f"{value & ((1 << 64) - 1):x}",
                                                   f"{KEY:x}", str(KEY)))


def test_the_plan_marks_the_keys_secret(built):
    plan = load_plan(built)
    for name in ("inbound_sa", "outbound_sa"):
        secret = {v.name for v in plan.table(name).values if v.secret}
        assert secret == {"key", "salt"}, name
    assert not any(v.secret for v in plan.table("spi_steering").values)


@pytest.mark.parametrize("given", [TOO_WIDE, f"{TOO_WIDE:#x}", f"0x{KEY:x}zz", "2b:7e:15:16:28:ae"])
def test_a_refused_key_is_not_in_the_message(built, given):
    rt = Runtime(built)
    row = {"esp_spi": 7, "key": given, "salt": 1, "sa_index": 1, "vnet_port": 1, "vnet_mac": 1}
    with pytest.raises(InvalidEntry) as e:
        rt.table("inbound_sa").add_many([row])
    text = str(e.value)
    assert "inbound_sa.key" in text and "not shown" in text
    assert not _shows(text, TOO_WIDE) and (not isinstance(given, str) or given.lower() not in text.lower())
    assert e.value.__cause__ is None and e.value.__suppress_context__  # no traceback shows the original
    # a value not marked secret is still shown, so that its mistake can be found
    with pytest.raises(InvalidEntry, match="70000"):
        rt.table("inbound_sa").add_many([row | {"key": 1, "vnet_port": 70000}])


def test_an_entries_file_with_a_bad_value_does_not_show_it(tmp_path):
    f = tmp_path / "e.json"
    f.write_text('{"inbound_sa": [{"match": {"esp_spi": 7}, "values": {"key": "0x2b7e1516zz28aed2a6"}}]}')
    with pytest.raises(EntriesError) as e:
        load_entries(f)
    assert "key" in str(e.value) and "2b7e1516" not in str(e.value)


def test_an_entry_repr_holds_no_value():
    spec = EntrySpec("inbound_sa", {"esp_spi": (7, None)}, {"key": KEY, "salt": 0xCAFE})
    assert not _shows(repr(spec), KEY) and "51966" not in repr(spec)


def test_the_goal_file_is_owner_only(tmp_path):
    g = GoalStore(tmp_path / "goal.db")
    g.close()
    assert stat.S_IMODE((tmp_path / "goal.db").stat().st_mode) == 0o600
    older = tmp_path / "older.db"  # made before the keys were kept in it
    older.touch(mode=0o644)
    GoalStore(older).close()
    assert stat.S_IMODE(older.stat().st_mode) == 0o600


def test_the_generated_api_shows_no_secret_value(built):
    import importlib.util

    spec = importlib.util.spec_from_file_location("ipsec_api", built / "python/ipsec_gateway/__init__.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    v = mod.InboundSaValues(key=KEY, salt=0xCAFE, sa_index=9, vnet_port=18, vnet_mac=1)
    assert not _shows(repr(v), KEY) and "51966" not in repr(v) and "vnet_port=18" in repr(v)
    assert v.key == KEY  # the value itself is there for the caller


def test_secret_is_a_word_only_after_a_value_fields_type(tmp_path):
    """``secret`` marks a table value; it stays a name everywhere else (a field called secret)."""
    src = tmp_path / "t.nfp"
    text = (
        "header h { secret: bit<8>; }\npacket { x: h; }\nmetadata { secret: bit<8>; }\n"
        "parser p { state start { extract x; transition accept; } }\n"
        "table t { key { x.secret: exact; } value { secret: bit<8> secret; port: bit<16>; } size = 16; }\n"
        "stage s { lookup t { hit(r) { meta.secret = r.secret; forward(r.port); } miss { drop(no_route); } } }\n"
        "ports all = [0..3];\npipeline main { ports = all; parser = p; stages = [s]; traffic = 100%; }\n")
    src.write_text(text)
    c = compile_file(str(src), "dpdk")
    t = c.program.tables["t"]
    assert [(v.name, v.secret) for v in t.values] == [("secret", True), ("port", False)]
    printed = print_module(parse_text(text, str(src), Diagnostics()))
    assert "secret: bit<8> secret;" in printed and "header h {\n  secret: bit<8>;" in printed



def test_a_corrupt_goal_entry_is_named_without_its_text(tmp_path):
    import sqlite3

    from runtime.goal import GoalError

    GoalStore(tmp_path / "goal.db").close()
    db = sqlite3.connect(tmp_path / "goal.db")
    db.execute("INSERT INTO entries VALUES ('inbound_sa', '[[7, null]]', 0, '[\"2b7e1516zz28aed2a6\", 1]')")
    db.commit()
    db.close()
    g = GoalStore(tmp_path / "goal.db")
    with pytest.raises(GoalError) as e:
        list(g.entries("inbound_sa", 1, 2))
    g.close()
    assert "inbound_sa" in str(e.value) and "2b7e1516" not in str(e.value) and e.value.__cause__ is None
