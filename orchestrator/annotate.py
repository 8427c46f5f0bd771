"""Inject ``_site="σ"`` into each ctx.run/ctx.race call of the decoded text.

The annotation is inserted on the line of the call's closing parenthesis, so
line numbers do not move. An existing ``_site`` is accepted only when it
equals the computed site. The annotated text is parsed again and must yield
the same sites, which makes the host's annotation table the whitelist.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass

from broker.errors import AnnotationError
from orchestrator.sites import SITE_KEYWORD, Site, assign_sites, is_site_call


@dataclass(frozen=True)
class Annotated:
    text: str
    sites: tuple[Site, ...]

    @property
    def whitelist(self) -> dict[str, Site]:
        return {s.site: s for s in self.sites}


def _char_offsets(text: str) -> tuple[list[str], list[int]]:
    lines = text.split("\n")
    starts, pos = [], 0
    for line in lines:
        starts.append(pos)
        pos += len(line) + 1
    return lines, starts


def _to_index(lines: list[str], starts: list[int], lineno: int, byte_col: int) -> int:
    line = lines[lineno - 1]
    return starts[lineno - 1] + len(line.encode("utf-8")[:byte_col].decode("utf-8", "replace"))


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


def annotate(text: str, tree: ast.Module | None = None) -> Annotated:
    tree = tree if tree is not None else ast.parse(text)
    sites = assign_sites(tree)
    calls = [n for n in ast.walk(tree) if is_site_call(n)]
    by_pos = {(c.lineno, c.col_offset): c for c in calls}
    lines, starts = _char_offsets(text)
    inserts: list[tuple[int, str]] = []
    for site in sites:
        call = by_pos[(site.line, site.col)]
        existing = _existing_site(call)
        if existing is not None:
            if not (isinstance(existing.value, ast.Constant) and existing.value.value == site.site):
                raise AnnotationError(
                    f"line {site.line}: `_site` is reserved for the host and does not match "
                    f"the computed site {site.site!r}; remove the `_site` argument",
                    site=site.site, line=site.line)
            continue
        args: list[ast.expr | ast.keyword] = [
            *call.args, *[k for k in call.keywords if k.arg != SITE_KEYWORD]]
        close = _to_index(lines, starts, call.end_lineno or call.lineno,
                          call.end_col_offset or 0) - 1
        if args:
            last = max(args, key=lambda a: (a.end_lineno or 0, a.end_col_offset or 0))
            after = _to_index(lines, starts, last.end_lineno or 0, last.end_col_offset or 0)
            comma = _has_trailing_comma(text[after:close])
        else:
            comma = True
        inserts.append((close, f"{'' if comma else ', '}{SITE_KEYWORD}={json.dumps(site.site)}"))
    out = text
    for index, piece in sorted(inserts, reverse=True):
        out = out[:index] + piece + out[index:]
    return Annotated(text=out, sites=tuple(sites))


def verify_annotation(annotated: Annotated) -> None:
    """Re-parse the annotated text: same sites, each call carrying exactly its site."""
    tree = ast.parse(annotated.text)
    again = assign_sites(tree)
    if [(s.site, s.fingerprint) for s in again] != [
            (s.site, s.fingerprint) for s in annotated.sites]:
        raise AnnotationError("annotation changed the call structure; report this as a bug")
    for node in ast.walk(tree):
        if is_site_call(node):
            kw = _existing_site(node)
            if kw is None or not isinstance(kw.value, ast.Constant):
                raise AnnotationError(f"line {node.lineno}: call left without a site")
    site_by_pos = {(s.line, s.col): s.site for s in again}
    for node in ast.walk(tree):
        if is_site_call(node):
            kw = _existing_site(node)
            assert kw is not None and isinstance(kw.value, ast.Constant)
            if kw.value.value != site_by_pos[(node.lineno, node.col_offset)]:
                raise AnnotationError(f"line {node.lineno}: site annotation mismatch")
