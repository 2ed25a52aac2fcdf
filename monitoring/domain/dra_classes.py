"""Devices per DeviceClass on each node (pure): the capacity of a device-class quota (issue 34).

A team's quota on a DeviceClass is a device count, ``<class>.deviceclass.resource.k8s.io/devices``
(the ResourceQuota claim evaluator's name). What the cluster has of it is the number of published
devices the class selects: a DeviceClass's ``spec.selectors`` are CEL expressions, all of which a
device must satisfy to be of the class (kubernetes staging/src/k8s.io/api/resource/v1/types.go —
``DeviceClassSpec.Selectors``; the scheduler's allocator evaluates them per device:
staging/src/k8s.io/dynamic-resource-allocation/structured/internal/stable/allocator_stable.go —
``selectorsMatch``). They are evaluated here with cel-python over the CEL environment of
staging/src/k8s.io/dynamic-resource-allocation/cel/compile.go:

* ``device.driver`` — the slice's driver (string);
* ``device.attributes[<domain>][<name>]`` — each attribute under its qualified name's domain (an
  unqualified name belongs to the driver's domain), as string, int or bool; a ``version``
  attribute as its string (cel-python has no semver type: comparing versions is not supported);
* ``device.capacity[<domain>][<name>]`` — quantities as strings (cel-python has no Kubernetes
  ``quantity`` library: a selector comparing capacities cannot be evaluated);
* ``device.allowMultipleAllocations`` — bool.

A selector that fails to compile or to evaluate on a device makes the class's capacity unknown:
it is left out (not guessed), with a note naming the class and the error — as the allocator, which
refuses to allocate from a class whose selectors fail.

Cost: cel-python needs ~0.3 ms per evaluation, so each class's result is cached per device
*signature*: the driver and the attributes and capacities whose names occur literally in the
class's expressions (a selector cannot read a name it does not spell). Expressions that could read
names they do not spell (a map macro or function over ``attributes`` or ``capacity``: ``exists``,
``all``, ``map``, ``filter``, ``size``, ``in``) are evaluated per device, uncached.

Only devices of slices with a ``spec.nodeName`` count (a node's devices); the caller keeps the
schedulable nodes. The pool's highest generation only, as everywhere (types.go —
``ResourcePool.Generation``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import celpy
from celpy import celtypes

__all__ = ["class_devices_per_node", "newest_slices"]

_UNCACHEABLE = re.compile(r"\b(exists|exists_one|all|map|filter|size)\s*\(|\bin\b")


def newest_slices(slices: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The slices of each pool's highest ``spec.pool.generation``."""
    slices = list(slices)
    newest: dict[tuple[str, str], int] = {}
    for item in slices:
        spec = item.get("spec") or {}
        pool = spec.get("pool") or {}
        key = (str(spec.get("driver") or ""), str(pool.get("name") or ""))
        generation = int(pool.get("generation") or 0)
        newest[key] = max(generation, newest.get(key, generation))
    kept = []
    for item in slices:
        spec = item.get("spec") or {}
        pool = spec.get("pool") or {}
        key = (str(spec.get("driver") or ""), str(pool.get("name") or ""))
        if int(pool.get("generation") or 0) == newest[key]:
            kept.append(item)
    return kept


def _value(attribute: Mapping[str, Any]) -> Any:
    for kind, cel in (("string", celtypes.StringType), ("version", celtypes.StringType)):
        if kind in attribute:
            return cel(str(attribute[kind]))
    if "bool" in attribute:
        return celtypes.BoolType(bool(attribute["bool"]))
    if "int" in attribute:
        return celtypes.IntType(int(attribute["int"]))
    return None


def _qualified(entries: Mapping[str, Any], driver: str, read) -> celtypes.MapType:
    by_domain: dict[str, dict[celtypes.StringType, Any]] = {}
    for name, raw in entries.items():
        domain, _, short = str(name).rpartition("/")
        value = read(raw or {})
        if value is None:
            continue
        by_domain.setdefault(domain or driver, {})[celtypes.StringType(short)] = value
    return celtypes.MapType(
        {celtypes.StringType(d): celtypes.MapType(v) for d, v in by_domain.items()}
    )


def _activation(driver: str, device: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "device": celtypes.MapType(
            {
                celtypes.StringType("driver"): celtypes.StringType(driver),
                celtypes.StringType("attributes"): _qualified(
                    device.get("attributes") or {}, driver, _value
                ),
                celtypes.StringType("capacity"): _qualified(
                    device.get("capacity") or {},
                    driver,
                    lambda c: celtypes.StringType(str(c.get("value"))) if "value" in c else None,
                ),
                celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(
                    bool(device.get("allowMultipleAllocations"))
                ),
            }
        )
    }


class _Class:
    """One DeviceClass's compiled selectors and its per-signature cache."""

    def __init__(self, name: str, expressions: list[str]):
        self.name = name
        env = celpy.Environment()
        self.programs = [env.program(env.compile(text)) for text in expressions]
        text = " ".join(expressions)
        self.cacheable = not _UNCACHEABLE.search(text)
        self.spelled = text
        self.cache: dict[tuple, bool] = {}

    def _signature(self, driver: str, device: Mapping[str, Any]) -> tuple:
        def named(entries: Mapping[str, Any]) -> tuple:
            return tuple(
                sorted(
                    (str(k), repr(v))
                    for k, v in entries.items()
                    if str(k).rpartition("/")[2] in self.spelled
                )
            )

        return (
            driver,
            named(device.get("attributes") or {}),
            named(device.get("capacity") or {}),
            bool(device.get("allowMultipleAllocations")),
        )

    def matches(self, driver: str, device: Mapping[str, Any]) -> bool:
        key = self._signature(driver, device) if self.cacheable else None
        if key is not None and key in self.cache:
            return self.cache[key]
        activation = _activation(driver, device)
        result = True
        for program in self.programs:
            value = program.evaluate(activation)
            if isinstance(value, Exception):
                raise value
            if not isinstance(value, celtypes.BoolType):
                raise TypeError(f"a selector gave {value!r}, not a bool")
            if not value:
                result = False
                break
        if key is not None:
            self.cache[key] = result
        return result


def _compiled(classes: Iterable[Mapping[str, Any]], notes: list[str]) -> Iterator[_Class]:
    for item in sorted(classes, key=lambda c: str((c.get("metadata") or {}).get("name") or "")):
        name = str((item.get("metadata") or {}).get("name") or "")
        selectors = (item.get("spec") or {}).get("selectors") or ()
        expressions = [str((s.get("cel") or {}).get("expression") or "") for s in selectors]
        if not name:
            continue
        try:
            yield _Class(name, [e for e in expressions if e])
        except Exception as e:
            notes.append(
                f"DRA: DeviceClass {name}'s selectors cannot be compiled ({type(e).__name__}): "
                "its capacity is not counted"
            )


def class_devices_per_node(
    classes: Iterable[Mapping[str, Any]],
    slices: Iterable[Mapping[str, Any]],
    notes: list[str],
) -> dict[str, dict[str, int]]:
    """``{DeviceClass: {node: devices of the class the node's slices publish}}``.

    Steps: compile each class's selectors (a class without selectors selects every device);
    for every device of the newest generation's node-local slices, count it for each class
    whose selectors all hold. A class whose selectors fail on some device is dropped whole,
    with one note (its capacity is unknown). Deterministic: classes and slices in order.
    """
    compiled = list(_compiled(classes, notes))
    counts: dict[str, dict[str, int]] = {c.name: {} for c in compiled}
    failed: dict[str, str] = {}
    for item in newest_slices(slices):
        spec = item.get("spec") or {}
        node = spec.get("nodeName")
        if not node:
            continue
        driver = str(spec.get("driver") or "")
        for device in spec.get("devices") or ():
            for cls in compiled:
                if cls.name in failed:
                    continue
                try:
                    if cls.matches(driver, device):
                        per_node = counts[cls.name]
                        per_node[str(node)] = per_node.get(str(node), 0) + 1
                except Exception as e:
                    failed[cls.name] = f"{type(e).__name__}: {e}"[:200]
    for name, error in sorted(failed.items()):
        notes.append(
            f"DRA: DeviceClass {name}'s selectors cannot be evaluated on the published devices "
            f"({error}): its capacity is not counted"
        )
        counts.pop(name, None)
    return {name: dict(sorted(per.items())) for name, per in sorted(counts.items())}
