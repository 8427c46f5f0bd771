"""Tag every counted call of the decoded text with its local site.

``ctx.run(...)`` / ``ctx.race(...)`` get a ``_site="…"`` keyword; a call of an
async helper that reaches one is wrapped as ``__at__("…", helper(...))`` and a
helper handed over as a value (a ``ctx.pipeline`` stage, a ``ctx.dag`` node) as
``__fn__(helper)``, so the runtime knows the chain of call sites that led to
each capability call: the chain where the call expression stands in the source,
wherever the coroutine is later awaited.
Every insertion stays on the line it belongs to, so line numbers do not move.
An existing ``_site`` is accepted only when it equals the computed site. The
annotated text is parsed again and must yield the same sites and tags, which
makes the host's site table the whitelist.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass

from broker.errors import AnnotationError
from broker.syntax import parse_python
from orchestrator.checker.reach import Reach
from orchestrator.site_program import is_site_call
from orchestrator.sites import (
    AT_FUNCTION,
    FN_FUNCTION,
    SITE_KEYWORD,
    Site,
    site_table,
    unwrap_at,
)


@dataclass(frozen=True)
class Annotated:
    text: str
    sites: tuple[Site, ...]


class _Offsets:
    """Character offsets of (line, UTF-8 byte column) positions, as ast reports them."""

    def __init__(self, text: str) -> None:
        self.lines = text.split("\n")
        self.starts: list[int] = []
        pos = 0
        for line in self.lines:
            self.starts.append(pos)
            pos += len(line) + 1

    def index(self, lineno: int, byte_col: int) -> int:
        line = self.lines[lineno - 1]
        return self.starts[lineno - 1] + len(
            line.encode("utf-8")[:byte_col].decode("utf-8", "replace"))


def _has_trailing_comma(segment: str) -> bool:
    """Whether a comma separates the last argument from the closing parenthesis."""
    in_comment = False
    for ch in segment:
        if in_comment:
            in_comment = ch != "\n"
        elif ch == "#":
            in_comment = True
        elif ch == ",":
            return True
    return False


def _existing_site(call: ast.Call) -> ast.keyword | None:
    for kw in call.keywords:
        if kw.arg == SITE_KEYWORD:
            return kw
    return None


def _site_keyword(text: str, offsets: _Offsets, call: ast.Call, local: str
                  ) -> tuple[int, str] | None:
    existing = _existing_site(call)
    if existing is not None:
        if not (isinstance(existing.value, ast.Constant) and existing.value.value == local):
            raise AnnotationError(
                f"line {call.lineno}: `_site` is reserved for the host and does not match "
                f"the computed site {local!r}; remove the `_site` argument",
                site=local, line=call.lineno)
        return None
    args: list[ast.expr | ast.keyword] = [*call.args, *call.keywords]
    close = offsets.index(call.end_lineno or call.lineno, call.end_col_offset or 0) - 1
    if args:
        last = max(args, key=lambda a: (a.end_lineno or 0, a.end_col_offset or 0))
        after = offsets.index(last.end_lineno or 0, last.end_col_offset or 0)
        comma = _has_trailing_comma(text[after:close])
    else:
        comma = True
    return close, f"{'' if comma else ', '}{SITE_KEYWORD}={json.dumps(local)}"


def annotate(text: str, tree: ast.Module | None = None) -> Annotated:
    tree = tree if tree is not None else parse_python(text)
    unwrap_at(tree)  # the bounds are asked about the calls as the script wrote them
    table = site_table(tree, Reach(tree))
    offsets = _Offsets(text)
    # (position, order, text); at one position the piece inserted last ends up first,
    # so a wrapper's ")" (0) lands before a `_site=` keyword (1) before an opening (2).
    inserts: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if id(node) in table.handed and isinstance(node, ast.Name):
            start = offsets.index(node.lineno, node.col_offset)
            end = offsets.index(node.end_lineno or node.lineno, node.end_col_offset or 0)
            inserts.append((start, 2, f"{FN_FUNCTION}("))
            inserts.append((end, 0, ")"))
            continue
        counted = table.local.get(id(node))
        if counted is None or not isinstance(node, ast.Call):
            continue
        if is_site_call(node):
            keyword = _site_keyword(text, offsets, node, counted.local)
            if keyword is not None:
                inserts.append((keyword[0], 1, keyword[1]))
            continue
        start = offsets.index(node.lineno, node.col_offset)
        end = offsets.index(node.end_lineno or node.lineno, node.end_col_offset or 0)
        inserts.append((start, 2, f"{AT_FUNCTION}({json.dumps(counted.local)}, "))
        inserts.append((end, 0, ")"))
    out = text
    for index, _, piece in sorted(inserts, key=lambda i: (i[0], i[1]), reverse=True):
        out = out[:index] + piece + out[index:]
    annotated = Annotated(text=out, sites=table.sites)
    verify_annotation(annotated)
    return annotated


def verify_annotation(annotated: Annotated) -> None:
    """Re-parse the annotated text: same sites, each counted call carrying its own tag."""
    tree = parse_python(annotated.text)
    tags = unwrap_at(tree)
    again = site_table(tree)
    if [(s.site, s.fingerprint) for s in again.sites] != [
            (s.site, s.fingerprint) for s in annotated.sites]:
        raise AnnotationError("annotation changed the call structure; report this as a bug")
    for node in ast.walk(tree):
        if (id(node) in again.handed) != (isinstance(node, ast.Name) and id(node) in tags):
            raise AnnotationError(f"line {getattr(node, 'lineno', 0)}: a helper handed over "
                                  "as a value without its tag (or a tag around another name)")
        counted = again.local.get(id(node))
        if counted is None or not isinstance(node, ast.Call):
            if id(node) in tags and not isinstance(node, ast.Name):
                raise AnnotationError(f"line {getattr(node, 'lineno', 0)}: a call-site tag "
                                      "around a call that does not reach a capability")
            continue
        if is_site_call(node):
            kw = _existing_site(node)
            tag = kw.value.value if kw is not None and isinstance(kw.value, ast.Constant) else None
        else:
            tag = tags.get(id(node))
        if tag != counted.local:
            raise AnnotationError(f"line {node.lineno}: call left without its site")
