"""CEL validation rules of CRD schemas (``x-kubernetes-validations``), evaluated with cel-python.

Any CRD's ``openAPIV3Schema`` works: ``Validator(schema).validate(obj, old)`` returns the causes a
real API server reports. It imitates kubernetes/kubernetes
``staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/validation.go``:

* ``Validator.validate``/``validateExpressions``: every rule is evaluated at the schema node where
  it sits, with ``self`` bound to that node's value; absent and null values are not validated
  ("We only validate non-null values").
* Transition rules (rules that reference ``oldSelf``) run only when the old object has a
  correlatable value at the node ("transition rules are evaluated only if there is a comparable
  existing value"): on update, through object properties and map values by key
  (``validateMap``, ``MapIsCorrelatable``) and through items of ``x-kubernetes-list-type: map``
  lists by their keys (``validateArray``, ``makeMapList``); never through other lists.
  ``optionalOldSelf`` needs CEL optionals, which cel-python lacks: such a rule is reported by
  :meth:`Validator.problems` and answers a "rule compile error" cause.
* A rule that is not ``true`` gives ``fieldErrorForReason(fldPath, sts.Type, detail, reason)``:
  the detail is the evaluated ``messageExpression``, else ``message``, else ``failed rule:
  <rule>`` (``ruleMessageOrDefault``); ``fieldPath`` is appended to the node's path; the value is
  the schema type (``Invalid value: "object": ...``); the root's path prints as ``<nil>``, as
  ``field.Path.String`` prints a nil path.
* Runtime errors: ``<error> evaluating rule: <message or rule>`` (``ruleErrorString``), and the
  "no such overload" form.
* Ratcheting (feature ``CRDValidationRatcheting``, GA): on update, a failing rule that does not
  reference ``oldSelf`` is only a warning when its node, or else its nearest correlatable
  ancestor, equals the old value (``ratchetingOptions.shouldRatchetError``; sets also correlate
  by value, as ``common.CorrelatedObject.Index`` does). The fake drops those warnings.

Values reach CEL typed by the schema, as ``UnstructuredToVal`` (``schema/cel/values.go``) and
``model.SchemaDeclType`` type them: ``integer`` → int, ``number`` → double, strings with
``format: date-time``/``date`` → timestamp, ``duration`` → duration, ``byte`` → bytes; object
property names escaped as ``k8s.io/apiserver/pkg/cel/escaping.go`` ``Escape`` does (``__dash__``,
``__namespace__``, ...); at a resource root ``metadata`` holds only ``name`` and ``generateName``
(``model.WithTypeAndObjectMeta``).

Not imitated: the cost budget, compile-time type checking (cel-python parses; the function names a
rule calls are checked against what cel-python implements, see :func:`unsupported_functions`),
the Kubernetes CEL libraries (``quantity``, ``isSorted``, ``url``, ``ip``, the strings extension,
...; a rule that calls them is one of :meth:`Validator.problems`), ``allOf`` nodes' rules, and
order-insensitive equality of set and map lists.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import celpy
from celpy import celtypes, evaluation
from lark import Token, Tree

Cause = dict[str, str]

ROOT_PATH = "<nil>"
# The macros cel-python expands itself (celpy/evaluation.py ``Evaluator.member_dot_arg`` and
# ``ident_arg``); every other call must name one of its functions.
_MACROS = frozenset({"has", "all", "exists", "exists_one", "map", "filter"})
# k8s.io/apiserver/pkg/cel/escaping.go celReservedSymbols
_RESERVED = frozenset(
    {
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    }
)
_ESCAPES = {"__": "__underscores__", ".": "__dot__", "-": "__dash__", "/": "__slash__"}
_EXPAND = re.compile(r"(__|[-./]|[^a-zA-Z0-9\-./_])")
_REASONS = {
    "FieldValueForbidden",
    "FieldValueRequired",
    "FieldValueDuplicate",
    "FieldValueInvalid",
}


def escape(name: str) -> str | None:
    """``escaping.go`` ``Escape``: the CEL field name for a property, or None (not accessible)."""
    if not name or name[0].isdigit():
        return None
    if name in _RESERVED:
        return f"__{name}__"
    ok = True

    def replace(match: re.Match[str]) -> str:
        nonlocal ok
        if match.group(0) in _ESCAPES:
            return _ESCAPES[match.group(0)]
        ok = False
        return ""

    escaped = _EXPAND.sub(replace, name)
    return escaped if ok else None


def rules(schema: dict, path: str = "") -> Iterator[tuple[str, dict]]:
    """Every ``x-kubernetes-validations`` entry of ``schema``, with the schema path it sits at
    (``.spec.resourceGroups[]``)."""
    if not isinstance(schema, dict):
        return
    for rule in schema.get("x-kubernetes-validations") or ():
        yield path or ".", rule
    for name, sub in (schema.get("properties") or {}).items():
        yield from rules(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from rules(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from rules(schema["additionalProperties"], f"{path}{{}}")


def unsupported_functions(tree: Tree) -> set[str]:
    """The functions a parsed rule calls that cel-python does not implement (a Kubernetes CEL
    library function such as ``quantity`` or ``isSorted``: cel-python only finds out when it
    evaluates the call)."""
    known = set(evaluation.base_functions) | _MACROS
    names = set()
    for sub in tree.iter_subtrees():
        if sub.data == "ident_arg":
            token = sub.children[0]
        elif sub.data == "member_dot_arg":
            token = sub.children[1]
        else:
            continue
        if isinstance(token, Token):
            names.add(str(token))
    return names - known


def _uses(tree: Tree, name: str) -> bool:
    return any(
        isinstance(v, Token) and v.type == "IDENT" and str(v) == name
        for v in tree.scan_values(lambda v: isinstance(v, Token))
    )


# --------------------------------------------------------------------------- values


def to_cel(value: Any, schema: dict | None, *, resource_root: bool = False) -> Any:
    """A JSON value as the CEL value the API server binds for ``schema`` (``UnstructuredToVal``)."""
    schema = schema or {}
    if value is None:
        return None
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if resource_root or schema.get("x-kubernetes-embedded-resource"):
            value = dict(value)
            meta = value.get("metadata")
            if isinstance(meta, dict):
                # model.WithTypeAndObjectMeta: only name and generateName are declared
                value["metadata"] = {k: meta[k] for k in ("name", "generateName") if k in meta}
            props = {
                **(props or {}),
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}, "generateName": {"type": "string"}},
                },
            }
        if props:
            out = {}
            for key, sub in value.items():
                name = escape(key)
                if name is None:
                    continue
                child = props.get(key)
                out[celtypes.StringType(name)] = (
                    to_cel(sub, child) if child is not None else celpy.json_to_cel(sub)
                )
            return celtypes.MapType(out)
        if isinstance(extra, dict):
            return celtypes.MapType(
                {celtypes.StringType(k): to_cel(v, extra) for k, v in value.items()}
            )
        return celpy.json_to_cel(value)
    if isinstance(value, list):
        items = schema.get("items") if isinstance(schema.get("items"), dict) else None
        return celtypes.ListType([to_cel(v, items) for v in value])
    kind = schema.get("type")
    if isinstance(value, str):
        fmt = schema.get("format")
        try:
            if kind == "string" and fmt in ("date-time", "date"):
                return celtypes.TimestampType(value if fmt == "date-time" else f"{value}T00:00:00Z")
            if kind == "string" and fmt == "duration":
                return celtypes.DurationType(value)
            if kind == "string" and fmt == "byte":
                return celtypes.BytesType(base64.b64decode(value))
        except (ValueError, TypeError):
            pass  # the schema's format check refuses it; CEL sees the string
        return celtypes.StringType(value)
    if isinstance(value, int):
        return celtypes.DoubleType(value) if kind == "number" else celtypes.IntType(value)
    if isinstance(value, float):
        if kind == "integer" and value.is_integer():
            return celtypes.IntType(int(value))
        return celtypes.DoubleType(value)
    return celpy.json_to_cel(value)


# --------------------------------------------------------------------------- compiled schema


@dataclass
class _Rule:
    source: dict
    program: Any = None
    message_program: Any = None
    uses_old_self: bool = False
    problem: str = ""  # why the rule cannot be evaluated ("" when it can)

    @property
    def error_string(self) -> str:
        """``ruleErrorString``: the message, else the rule."""
        return (self.source.get("message") or "").strip() or self.source["rule"].strip()


@dataclass
class _Node:
    schema: dict
    rules: list[_Rule] = field(default_factory=list)
    properties: dict[str, _Node] = field(default_factory=dict)
    additional: _Node | None = None
    items: _Node | None = None

    @property
    def type(self) -> str:
        return str(self.schema.get("type") or "")


def _compile(env: celpy.Environment, source: dict) -> _Rule:
    rule = _Rule(source)
    try:
        tree = env.compile(source["rule"])
    except celpy.CELParseError as e:
        rule.problem = f"rule compile error: {e}"
        return rule
    missing = unsupported_functions(tree)
    if missing:
        rule.problem = (
            "rule compile error: cel-python does not implement "
            + ", ".join(sorted(missing))
            + f" (rule: {source['rule']})"
        )
        return rule
    if source.get("optionalOldSelf"):
        rule.problem = "rule compile error: optionalOldSelf needs CEL optionals (cel-python)"
        return rule
    rule.uses_old_self = _uses(tree, "oldSelf")
    rule.program = env.program(tree)
    if source.get("messageExpression"):
        try:
            rule.message_program = env.program(env.compile(source["messageExpression"]))
        except celpy.CELParseError as e:
            rule.problem = f"messageExpression compile error: {e}"
    return rule


def _build(env: celpy.Environment, schema: dict) -> _Node | None:
    """The validator tree for ``schema``: only the nodes with rules at or below them
    (``validator``, ``hasXValidations``)."""
    if not isinstance(schema, dict):
        return None
    node = _Node(schema, [_compile(env, r) for r in schema.get("x-kubernetes-validations") or ()])
    for name, sub in (schema.get("properties") or {}).items():
        child = _build(env, sub)
        if child is not None:
            node.properties[name] = child
    if isinstance(schema.get("additionalProperties"), dict):
        node.additional = _build(env, schema["additionalProperties"])
    if isinstance(schema.get("items"), dict):
        node.items = _build(env, schema["items"])
    if node.rules or node.properties or node.additional or node.items:
        return node
    return None


def _child_path(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _list_keys(schema: dict, item: Any) -> tuple | None:
    if not isinstance(item, dict):
        return None
    keys = schema.get("x-kubernetes-list-map-keys") or ()
    item_schema = (schema.get("items") or {}).get("properties") or {}
    return tuple(item.get(k, (item_schema.get(k) or {}).get("default")) for k in keys)


def _error_text(error: Exception) -> str:
    """cel-python's error as the API server words cel-go's (``no such key: x``)."""
    args = getattr(error, "args", ())
    text = str(args[0]) if args else str(error)
    cause = args[1] if len(args) > 1 else None
    if cause is KeyError:
        match = re.search(r"no such member in mapping: '(.*)'", text)
        if match:
            return f"no such key: {match.group(1)}"
    if cause is ZeroDivisionError:
        return "division by zero"
    if "no matching overload" in text or "no such overload" in text:
        return "no such overload"
    return text


class Validator:
    """The compiled ``x-kubernetes-validations`` rules of one CRD version's schema."""

    def __init__(self, schema: dict) -> None:
        self.env = celpy.Environment()
        self.root = _build(self.env, schema)

    @property
    def has_rules(self) -> bool:
        """Whether the schema has any rule (``NewValidator`` returns nil when it has none)."""
        return self.root is not None

    def problems(self) -> list[tuple[str, str]]:
        """``(rule, why)`` for each rule cel-python cannot evaluate (empty: all of them work)."""
        out = []

        def walk(node: _Node | None) -> None:
            if node is None:
                return
            out.extend((r.source["rule"], r.problem) for r in node.rules if r.problem)
            for child in node.properties.values():
                walk(child)
            walk(node.additional)
            walk(node.items)

        walk(self.root)
        return out

    def validate(self, obj: dict, old: dict | None = None) -> list[Cause]:
        """The causes of every failing rule for ``obj`` (a create when ``old`` is None)."""
        causes: list[Cause] = []
        if self.root is not None:
            self._validate(
                self.root, obj, old, "", causes, root=True, equal=old is not None and obj == old
            )
        return causes

    # ------------------------------------------------------------------ walk

    def _validate(
        self,
        node: _Node,
        value: Any,
        old: Any,
        path: str,
        causes: list[Cause],
        *,
        equal: bool,
        root: bool = False,
    ) -> None:
        if value is None:
            return
        if node.rules:
            self._expressions(node, value, old, path, causes, equal=equal, root=root)
        if isinstance(value, dict):
            old_map = old if isinstance(old, dict) else None
            for key, sub in value.items():
                child = node.properties.get(key) if node.properties else None
                if (
                    child is None
                    and node.additional is not None
                    and "properties" not in node.schema
                ):
                    child = node.additional
                    child_path = f"{path}[{key}]"
                else:
                    child_path = _child_path(path, key)
                if child is None:
                    continue
                old_sub = old_map.get(key) if old_map is not None else None
                correlated = old_map is not None and key in old_map
                self._validate(
                    child,
                    sub,
                    old_sub,
                    child_path,
                    causes,
                    equal=(old_sub == sub) if correlated else equal,
                )
        elif isinstance(value, list) and node.items is not None:
            list_type = node.schema.get("x-kubernetes-list-type")
            old_list = old if isinstance(old, list) else []
            by_key = {}
            if list_type == "map":
                by_key = {_list_keys(node.schema, o): o for o in old_list}
            for i, item in enumerate(value):
                old_item = by_key.get(_list_keys(node.schema, item)) if list_type == "map" else None
                if list_type == "map" and old_item is not None:
                    item_equal = old_item == item
                elif list_type == "set" and old is not None:
                    item_equal = item in old_list
                else:
                    item_equal = equal
                self._validate(node.items, item, old_item, f"{path}[{i}]", causes, equal=item_equal)

    def _expressions(
        self,
        node: _Node,
        value: Any,
        old: Any,
        path: str,
        causes: list[Cause],
        *,
        equal: bool,
        root: bool,
    ) -> None:
        field_path = path or ROOT_PATH
        activation: dict[str, Any] | None = None
        for rule in node.rules:
            if rule.problem:
                causes.append(_invalid(field_path, node.type, rule.problem))
                continue
            if rule.uses_old_self and old is None:
                continue  # transition rules need a comparable existing value
            if activation is None:
                activation = {"self": to_cel(value, node.schema, resource_root=root)}
                if old is not None:
                    activation["oldSelf"] = to_cel(old, node.schema, resource_root=root)
            try:
                result = rule.program.evaluate(activation)
            except celpy.CELEvalError as e:
                result = e
            if isinstance(result, celpy.CELEvalError):
                text = _error_text(result)
                if text == "no such overload":
                    detail = (
                        "'no such overload': call arguments did not match a supported operator, "
                        f"function or macro signature for rule: {rule.error_string}"
                    )
                else:
                    detail = f"{text} evaluating rule: {rule.error_string}"
                causes.append(_invalid(field_path, node.type, detail))
                continue
            if result is True or (isinstance(result, celtypes.BoolType) and bool(result)):
                continue
            if not rule.uses_old_self and equal:
                continue  # ratcheted: a warning upstream, nothing here
            causes.append(self._failure(rule, node, field_path, activation))

    @staticmethod
    def _failure(rule: _Rule, node: _Node, path: str, activation: dict[str, Any]) -> Cause:
        detail = ""
        if rule.message_program is not None:
            try:
                message = rule.message_program.evaluate(activation)
            except celpy.CELEvalError:
                message = None
            if isinstance(message, str) and message.strip() and "\n" not in message.strip():
                detail = message.strip()
        if not detail:
            detail = (rule.source.get("message") or "").strip() or (
                f"failed rule: {rule.error_string}"
            )
        field_path = rule.source.get("fieldPath")
        if field_path:
            base = "" if path == ROOT_PATH else path
            path = base + (field_path if field_path.startswith((".", "[")) else f".{field_path}")
            path = path.lstrip(".")
        reason = rule.source.get("reason") or "FieldValueInvalid"
        if reason not in _REASONS:
            reason = "FieldValueInvalid"
        if reason == "FieldValueForbidden":
            return {"reason": reason, "message": f"Forbidden: {detail}", "field": path}
        if reason == "FieldValueRequired":
            return {"reason": reason, "message": f"Required value: {detail}", "field": path}
        if reason == "FieldValueDuplicate":
            return {"reason": reason, "message": f'Duplicate value: "{node.type}"', "field": path}
        return _invalid(path, node.type, detail)


def _invalid(path: str, type_: str, detail: str) -> Cause:
    return {
        "reason": "FieldValueInvalid",
        "message": f'Invalid value: "{type_}": {detail}',
        "field": path,
    }
