"""Label and field selectors with the API server's grammar.

Label selectors: ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k`` (exists) and
``!k`` (does not exist), comma-separated (AND). Field selectors: ``path=v``, ``path==v``,
``path!=v`` over dotted paths (``status.phase``, ``spec.nodeName``, ``metadata.namespace``).
A parsed selector is a predicate over a stored object.

Label semantics follow ``k8s.io/apimachinery/pkg/labels/selector.go`` (``Requirement.Matches``):
``in``/``=``/``==`` need the key present with one of the values; ``notin``/``!=`` also match an
object without the key; ``k`` is ``Exists``, ``!k`` ``DoesNotExist``; requirements are ANDed
(``internalSelector.Matches``) and an empty ``in``/``notin`` set is a parse error
(``NewRequirement``: "for 'in', 'notin' operators, values set can't be empty").
"""

from __future__ import annotations

import re
from collections.abc import Callable

Predicate = Callable[[dict], bool]

_SET_RE = re.compile(r"^\s*(\S+)\s+(in|notin)\s+\((.*)\)\s*$")
_EQ_RE = re.compile(r"^\s*([^!=\s]+)\s*(==|=|!=)\s*([^\s]*)\s*$")
_KEY_RE = re.compile(r"^\s*(!?)\s*([^!=\s(),]+)\s*$")


class SelectorError(ValueError):
    """The selector string does not parse."""


def _split(selector: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p for p in (p.strip() for p in parts) if p]


def parse_label_selector(selector: str | None) -> Predicate | None:
    """Return a predicate over objects, or None for an empty selector (matches everything).

    Raises SelectorError on a malformed requirement.
    """
    if not selector or not selector.strip():
        return None
    checks: list[Callable[[dict[str, str]], bool]] = []
    for part in _split(selector):
        checks.append(_label_requirement(part))

    def match(obj: dict) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        return all(check(labels) for check in checks)

    return match


def _label_requirement(part: str) -> Callable[[dict[str, str]], bool]:
    if m := _SET_RE.match(part):
        key, op, raw = m.group(1), m.group(2), m.group(3)
        values = frozenset(v.strip() for v in raw.split(",") if v.strip())
        if not values:
            raise SelectorError(f"{part!r}: for 'in', 'notin' operators, values set can't be empty")
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if m := _EQ_RE.match(part):
        key, op, value = m.group(1), m.group(2), m.group(3)
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: key in labels and labels[key] == value
    if m := _KEY_RE.match(part):
        negate, key = m.group(1) == "!", m.group(2)
        if negate:
            return lambda labels: key not in labels
        return lambda labels: key in labels
    raise SelectorError(f"unable to parse requirement: {part!r}")


def parse_field_selector(selector: str | None) -> Predicate | None:
    """Return a predicate for a field selector, or None for an empty one.

    Raises SelectorError on anything but ``=``, ``==`` and ``!=`` requirements.
    """
    if not selector or not selector.strip():
        return None
    checks: list[tuple[tuple[str, ...], bool, str]] = []
    for part in _split(selector):
        m = _EQ_RE.match(part)
        if not m:
            raise SelectorError(f"invalid field selector requirement: {part!r}")
        path, op, value = m.group(1), m.group(2), m.group(3)
        checks.append((tuple(path.split(".")), op == "!=", value))

    def match(obj: dict) -> bool:
        for path, negate, value in checks:
            actual = _dig(obj, path)
            if (actual == value) == negate:
                return False
        return True

    return match


def _dig(obj: dict, path: tuple[str, ...]) -> str:
    node: object = obj
    for key in path:
        if not isinstance(node, dict):
            return ""
        node = node.get(key)
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)
