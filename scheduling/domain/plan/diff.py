"""Field diffs: the differences, in the fields we own, between a desired and a live object.

Modelled on kopf's ``DiffItem`` (``kopf/_cogs/structs/diffs.py``). Which fields count is decided
in :mod:`.ownership`; everything else is left alone and never counts: ``status`` and server
metadata; a key another manager added to a map we set (``count/pods`` in ``spec.hard``);
fields that defaulting, webhooks or controllers fill in (a Queue's ``dequeueStrategy`` from the
CRD default, the ``spec.parent: root`` that Volcano's queue controller patches onto a
parentless queue, the ``kubernetes.io/metadata.name`` label of a Namespace). Before comparing,
the desired manifest is defaulted like the API server would default it
(:func:`.defaults.server_defaults`), so a value the server fills in identically is no
difference either.

Invariant: values are compared after normalisation: a missing key, ``None``, ``""``, ``{}`` and
``[]`` are all "absent" (the API server drops empty optional fields); quantities are compared
semantically with the injected ``parse_quantity`` (``1Gi`` == ``1073741824``, ``0.5`` ==
``500m``); an empty diff means applying would leave the live object as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any

from scheduling.domain.render.labels import LABEL_MANAGED_BY

from .changes import FieldDiff
from .defaults import server_defaults
from .fields import QUANTITY_PATHS, Path, absent, format_path, matches, path_order, value_at
from .ownership import covered, field_leaves, ownership

__all__ = ["creation_diff", "diff_object"]

_OWNED_LABEL_PREFIX = "fairshare.io/"


def _same_quantity(old: Any, new: Any, parse_quantity: Callable[[str], Decimal]) -> bool:
    try:
        return bool(parse_quantity(str(old)) == parse_quantity(str(new)))
    except (ValueError, ArithmeticError):
        # An unparseable live value is never equal to what we render: report it, apply fixes it.
        return str(old) == str(new)


def _diff(
    old: Any,
    new: Any,
    path: Path,
    quantities: Sequence[Path],
    parse_quantity: Callable[[str], Decimal],
) -> Iterator[FieldDiff]:
    """Yield leaf differences between ``old`` (live) and ``new`` (desired), kopf-style.

    Maps recurse over the sorted union of keys, lists over indexes (an absent side counts as an
    empty map/list, so removals are reported per leaf); leaves compare as quantities on
    quantity paths, by equality otherwise; absent values (see ``absent``) are equal.
    """
    old = None if absent(old) else old
    new = None if absent(new) else new
    shape = _shape(old, new)
    if shape == "map":
        old_map, new_map = old or {}, new or {}
        for key in sorted(old_map.keys() | new_map.keys()):
            yield from _diff(
                old_map.get(key), new_map.get(key), (*path, key), quantities, parse_quantity
            )
    elif shape == "list":
        old_list, new_list = old or [], new or []
        for index in range(max(len(old_list), len(new_list))):
            yield from _diff(
                old_list[index] if index < len(old_list) else None,
                new_list[index] if index < len(new_list) else None,
                (*path, index),
                quantities,
                parse_quantity,
            )
    elif not _same_leaf(old, new, matches(path, quantities), parse_quantity):
        yield FieldDiff(format_path(path), old, new)


def _shape(old: Any, new: Any) -> str:
    """``map``/``list`` when both sides are (or are absent as) maps/lists, else ``leaf``."""
    for shape, kind in (("map", Mapping), ("list", list)):
        present = [value for value in (old, new) if value is not None]
        if present and all(isinstance(value, kind) for value in present):
            return shape
    return "leaf"


def _same_leaf(
    old: Any, new: Any, is_quantity: bool, parse_quantity: Callable[[str], Decimal]
) -> bool:
    if old is None or new is None:
        return old is new
    if is_quantity:
        return _same_quantity(old, new, parse_quantity)
    # type check so that True != 1 and "2" != 2: the API server would not treat them as equal
    return bool(old == new and type(old) is type(new))


def diff_object(
    desired: Mapping[str, Any],
    live: Mapping[str, Any],
    *,
    parse_quantity: Callable[[str], Decimal],
    last_applied_annotation: str | None = None,
) -> tuple[FieldDiff, ...]:
    """Return the differences in the fields we own between a desired and a live object.

    Empty means applying ``desired`` would leave the live object as it is (``unchanged``). See
    :mod:`.ownership` for which fields count.
    """
    kind = str(desired["kind"])
    quantities = QUANTITY_PATHS.get(kind, ())
    want = server_defaults(desired)
    wanted = field_leaves(want, kind)
    previous, others = ownership(live, last_applied_annotation)
    compare = set(wanted)
    compare |= {p for p in previous - wanted if not covered(p, others)}
    have_labels = value_at(live, ("metadata", "labels")) or {}
    compare |= {
        ("metadata", "labels", key)
        for key in have_labels
        if key.startswith(_OWNED_LABEL_PREFIX) or key == LABEL_MANAGED_BY
    }
    # A leaf whose parent we set whole (an atomic list) is compared with its parent.
    leaves = sorted(
        (p for p in compare if not any(q != p and p[: len(q)] == q for q in compare)),
        key=path_order,
    )
    diffs: list[FieldDiff] = []
    for path in leaves:
        if path[0] == "metadata":
            old, new = value_at(live, path), value_at(want, path)
            if old != new:
                diffs.append(FieldDiff(".".join(str(p) for p in path), old, new))
            continue
        diffs += _diff(value_at(live, path), value_at(want, path), path, quantities, parse_quantity)
    return tuple(diffs)


def creation_diff(desired: Mapping[str, Any]) -> tuple[FieldDiff, ...]:
    """The field diffs of creating ``desired``: ``(none) -> value`` for every field we own.

    The same as ``diff_object(desired, {"kind": ..., "metadata": {}})``, walked directly: a
    first sync lists thousands of creates, and comparing each with nothing costs more than the
    request that creates it.
    """
    want = server_defaults(desired)
    diffs: list[FieldDiff] = []

    def walk(value: Any, path: Path) -> None:
        if absent(value):
            return
        if isinstance(value, Mapping):
            for key in sorted(value):
                walk(value[key], (*path, key))
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(item, (*path, index))
        else:
            diffs.append(FieldDiff(format_path(path), None, value))

    for path in sorted(field_leaves(want, str(desired["kind"])), key=path_order):
        value = value_at(want, path)
        if path[0] == "metadata":
            if value is not None:
                diffs.append(FieldDiff(".".join(str(p) for p in path), None, value))
            continue
        walk(value, path)
    return tuple(diffs)
