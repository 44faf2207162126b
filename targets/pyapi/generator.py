"""The runtime API generator, named ``python-api``: writes ``OUT/python/<nf>/``, a
typed Python package with one class per table (keyword-only methods named after the ``.nfp``
key and value fields) on top of :mod:`runtime.api`.  It reads the IR's tables only."""

from __future__ import annotations

import keyword
import re
from pathlib import Path
from typing import Any

import jinja2

from compiler import ir
from compiler.ir import Span
from compiler.manifest import Plan
from compiler.placed import Placed
from targets.names import NameClash

__all__ = ["PythonApiGenerator", "render"]

_ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).parent), keep_trailing_newline=True,
                          undefined=jinja2.StrictUndefined, autoescape=False)


def _docstring_text(text: str) -> str:
    """``text`` safe inside a ``\"\"\"`` docstring: backslashes, quotes and line breaks escaped (a source
    path must not end the docstring or start an escape sequence)."""
    return text.encode("unicode_escape").decode("ascii").replace('"', '\\"')


_ENV.filters["doc"] = _docstring_text


def _camel(name: str) -> str:
    """``vni_to_qinq`` -> ``VniToQinq``; a keyword (table ``none`` -> ``None``) gets ``_``."""
    camel = "".join(p[:1].upper() + p[1:] for p in name.split("_") if p)
    return f"{camel}_" if keyword.iskeyword(camel) else camel


def _param(name: str) -> str:
    """A ``.nfp`` name as a Python parameter or attribute: a keyword (``class``, ``None``) or
    ``self`` gets ``_`` appended."""
    return f"{name}_" if keyword.iskeyword(name) or name == "self" else name


# what the package module and the Runtime class it derives from define themselves: a table's
# class or attribute must not replace them (runtime/api.py: Runtime's methods and the
# attributes its __init__ sets; tests/test_runtime_api.py checks this list against the class)
MODULE_NAMES = frozenset({"Path", "NamedTuple", "Runtime", "Table", "Value", "build_dir", "annotations"})
RUNTIME_ATTRS = frozenset({"PROGRAM", "close", "connect", "load", "table", "write", "out", "plan", "schemas", "switch",
                           "server", "caches", "apply_cache", "goal", "idle_notify", "intend", "reconcile", "register",
                           "counter", "meter", "steer", "move", "rebalance", "add_server",
                           "remove_server", "fail_over", "check_servers", "recover", "holding_caches",
                           "switch_lacks", "cache_locks", "steering", "writing", "restarts"})


class _Namespace:
    """One Python namespace of the package: every name claimed once, or NameClash at the
    ``.nfp`` name that would take it a second time."""

    def __init__(self, where: str, taken: frozenset[str]) -> None:
        self.where = where
        self.owner: dict[str, str] = dict.fromkeys(taken, "the runtime API itself")

    def claim(self, name: str, what: str, span: Span) -> str:
        other = self.owner.setdefault(name, what)
        if other != what:
            raise NameClash(f"{what} would be '{name}' in {self.where} of the Python runtime API, "
                            f"which {other} already is; rename one", span)
        return name


def _claim_names(prog: ir.Program, nf_class: str) -> None:
    """Raise NameClash unless every table's classes and attribute are names of its own."""
    module = _Namespace("the package module", MODULE_NAMES | {nf_class})
    attrs = _Namespace(f"class {nf_class}", RUNTIME_ATTRS)
    for t in prog.tables.values():
        what = f"table '{t.name}'"
        module.claim(_camel(t.name), what, t.span)
        module.claim(f"{_camel(t.name)}Values", what, t.span)
        attrs.claim(_param(t.name), what, t.span)
        fields = _Namespace(f"the methods of table '{t.name}'", frozenset({"self", "priority", "entry_priority"}))
        for name in [k.name for k in t.keys] + [v.name for v in t.values]:
            fields.claim(_param(name), f"field '{name}' of table '{t.name}'", t.span)


def _table(t: ir.Table) -> dict[str, Any]:
    keys = [{"name": k.name, "width": k.expr.width, "match": k.match} for k in t.keys]
    values = [{"name": v.name, "attr": _param(v.name), "width": v.width, "secret": v.secret} for v in t.values]
    key_params = ", ".join(f"{_param(k.name)}: Value" + (" | tuple[Value, Value]" if k.match != "exact" else "")
                           for k in t.keys)
    names = [k.name for k in t.keys]
    prio = ""  # ternary / range tables: the entry's priority (the higher wins), part of its identity
    if t.match in ("ternary", "range"):
        prio = "entry_priority" if "priority" in names + [v.name for v in t.values] else "priority"
    entry_params = key_params + (f", {prio}: int" if prio else "")  # what names one entry
    params = ", ".join([entry_params, *(f"{_param(v.name)}: Value" for v in t.values)])
    return {"name": t.name, "attr": _param(t.name), "cls": _camel(t.name), "source": f"{t.span.file}:{t.span.line}",
            "match": t.match,
            "size": t.size, "state": t.is_state, "key_fields": keys, "value_fields": values,
            "secrets": [v["attr"] for v in values if v["secret"]],
            "key_params": key_params, "entry_params": entry_params, "params": params,
            "priority": f", {prio}" if prio else "",
            "key_dict": "{" + ", ".join(f'"{n}": {_param(n)}' for n in names) + "}",
            "all_dict": "{" + ", ".join(f'"{n}": {_param(n)}' for n in names + [v.name for v in t.values]) + "}"}


def package_name(prog: ir.Program) -> str:
    """The package's name: the source file's stem as a Python identifier (other characters ``_``)."""
    name = re.sub(r"\W", "_", Path(prog.file).stem, flags=re.ASCII) or "nf"
    name = f"_{name}" if name[0].isdigit() else name
    return f"{name}_" if keyword.iskeyword(name) else name


def render(prog: ir.Program) -> str:
    nf = package_name(prog)
    cls = _camel(nf) or "Nf"
    _claim_names(prog, cls)
    return _ENV.get_template("api.py.j2").render(nf=nf, cls=cls, source=prog.file,
                                                 tables=[_table(t) for t in prog.tables.values()])


class PythonApiGenerator:
    name = "python-api"
    what = "runtime API"

    def emit(self, placed: Placed, plan: Plan, out: Path) -> dict[str, str]:
        nf = package_name(placed.program)
        folder = out / "python" / nf
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__init__.py").write_text(render(placed.program))
        (folder / "py.typed").write_text("")
        return {"python_api": f"python/{nf}/__init__.py"}
