"""How deeply statements and expressions nest in a declaration, measured without recursion.

Every pass after the parser (checker, lowering, printers, interpreter, Z3 encoding, the
code generators) walks statements and expressions recursively; ``limits.MAX_DEPTH`` keeps
them far from Python's stack limit.  A left-associative chain ``a + b + c`` is a tree as
deep as it is long, so operators count, parentheses do not.
"""

from __future__ import annotations

from collections.abc import Iterator

from lang import ast
from lang.diagnostics import Span

__all__ = ["too_deep"]

# The nodes that nest: statements and expressions (blocks and declarations are free).
_NESTING = (
    ast.Assign, ast.Let, ast.If, ast.Lookup, ast.Push, ast.Forward, ast.Insert, ast.Verify, ast.ExprStmt,
    ast.FieldInit, ast.SelectKey,
    ast.Member, ast.Slice, ast.Index, ast.Call, ast.Cast, ast.Unary, ast.Binary,
)


def too_deep(decl: ast.Decl, limit: int) -> Span | None:
    """The span of the first node of ``decl`` nested more than ``limit`` levels deep, or None."""
    stack: list[tuple[object, int]] = [(decl, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, _NESTING):
            depth += 1
            if depth > limit:
                return node.span
        stack.extend((child, depth) for child in _children(node))
    return None


def _children(node: object) -> Iterator[object]:
    """The syntax-tree nodes directly inside ``node`` (through tuples, not through strings)."""
    for name in getattr(node, "__slots__", ()):
        value = getattr(node, name)
        if isinstance(value, tuple):
            yield from _flatten(value)
        elif hasattr(value, "__slots__") and not isinstance(value, Span):
            yield value


def _flatten(values: tuple[object, ...]) -> Iterator[object]:
    for v in values:
        if isinstance(v, tuple):
            yield from _flatten(v)
        elif hasattr(v, "__slots__") and not isinstance(v, Span):
            yield v
