"""Regenerate the p4runtime wheel's ``_pb2`` modules in the form protobuf's C implementation
(upb) loads, so P4Runtime messages are built, parsed and serialized in C, not pure Python.

p4runtime 1.6.0 ships ``_pb2`` modules from an old protoc (``_descriptor.FileDescriptor(...,
serialized_pb=...)`` plus hand-built descriptor objects), which protobuf 4+ refuses unless
``PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python`` — ten times slower per message.  The wheel
ships no ``.proto`` files, but each old module holds its whole ``FileDescriptorProto`` as the
``serialized_pb=`` bytes; a modern module is just those bytes given to
``descriptor_pool.AddSerializedFile`` and the ``builder`` helpers, after the same imports.  So
this reads the bytes with :mod:`ast` (nothing is imported, so it runs with any Python and any
protobuf) and writes that module text: no protoc and no extra dependency.

The modules are rewritten in place in the virtualenv's site-packages (``build.py setup`` calls
:func:`regenerate`): every process of the venv — the CLI, the switch model, pytest, a generated
runtime package — then imports the fast modules with no ``sys.path`` order to keep right, and
the independent client venv (``.venv-p4rt``) is a different tree, untouched.  The wheel's
``p4`` package as shipped is kept under ``LEGACY`` in the venv (the byte-identity test and
``bench/bench_p4rt_load.py``'s "before" put it on ``PYTHONPATH``).  Idempotent: a module
already in the modern form is left alone; a reinstalled wheel is converted again.
"""

from __future__ import annotations

import ast
import sys
import sysconfig
from pathlib import Path

__all__ = ["LEGACY", "MODULES", "modern_module", "regenerate", "serialized_descriptor"]

MODULES = ("p4/config/v1/p4types_pb2.py", "p4/config/v1/p4info_pb2.py", "p4/v1/p4data_pb2.py",
           "p4/v1/p4runtime_pb2.py")
LEGACY = Path("share") / "nfc" / "p4runtime-legacy"  # under the venv: the wheel's original modules
_MARK = "# nfc: regenerated for upb by tools/p4rt_protos.py"


def _is_descriptor_call(call: ast.Call) -> bool:
    f = call.func
    return isinstance(f, ast.Attribute) and f.attr in ("FileDescriptor", "AddSerializedFile")


def serialized_descriptor(source: str) -> bytes:
    """The ``FileDescriptorProto`` bytes of a generated ``_pb2`` module, old form
    (``FileDescriptor(serialized_pb=b'...')``) or modern (``AddSerializedFile(b'...')``)."""
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and _is_descriptor_call(node)):
            continue
        args = [kw.value for kw in node.keywords if kw.arg == "serialized_pb"] + list(node.args)
        for arg in args:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, bytes):
                return arg.value
    raise ValueError("no serialized FileDescriptorProto in this module")


def _dependency_imports(source: str) -> list[str]:
    """The module's imports of the ``_pb2`` modules its descriptor depends on (they must be in
    the descriptor pool before it): every top-level ``from X import Y_pb2 as Z``."""
    out = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.ImportFrom) and all(a.name.endswith("_pb2") for a in node.names):
            out.append(ast.unparse(node))
    return out


def modern_module(source: str, module: str) -> str:
    """The text of ``module`` (dotted name) in the form protoc 4+ writes, from its old text."""
    data = serialized_descriptor(source)
    return "\n".join([
        "# -*- coding: utf-8 -*-",
        _MARK,
        '"""Generated protocol buffer code."""',
        "from google.protobuf import descriptor_pool as _descriptor_pool",
        "from google.protobuf import symbol_database as _symbol_database",
        "from google.protobuf.internal import builder as _builder",
        "",
        "_sym_db = _symbol_database.Default()",
        "",
        *_dependency_imports(source),
        "",
        f"DESCRIPTOR = _descriptor_pool.Default().AddSerializedFile({data!r})",
        "",
        "_globals = globals()",
        "_builder.BuildMessageAndEnumDescriptors(DESCRIPTOR, _globals)",
        f"_builder.BuildTopDescriptorsAndMessages(DESCRIPTOR, {module!r}, _globals)",
        "",
    ])


def regenerate(site_packages: Path, venv: Path) -> list[str]:
    """Rewrite the old-form modules of ``MODULES`` under ``site_packages``, first keeping the
    wheel's ``p4`` package as shipped under ``venv/LEGACY`` (every module not yet rewritten);
    returns the modules rewritten (none when all are modern already)."""
    old = [rel for rel in MODULES if _MARK not in (site_packages / rel).read_text()]
    if old:
        _keep_legacy(site_packages, venv / LEGACY)
    for rel in old:
        path = site_packages / rel
        path.write_text(modern_module(path.read_text(), rel.removesuffix(".py").replace("/", ".")))
    return old


def _keep_legacy(site_packages: Path, legacy: Path) -> None:
    """Copy the wheel's ``p4`` package (its ``.py`` files not rewritten yet) to ``legacy``, a
    tree that shadows the venv's when put on ``PYTHONPATH``."""
    for src in (site_packages / "p4").rglob("*.py"):
        text = src.read_text()
        if _MARK in text:
            continue
        dst = legacy / src.relative_to(site_packages)
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_text(text)


def main() -> int:
    """Run with the venv's Python: convert that venv's p4runtime modules."""
    done = regenerate(Path(sysconfig.get_paths()["purelib"]), Path(sys.prefix))
    print(f"p4runtime protos for upb: {', '.join(done) if done else 'already regenerated'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
