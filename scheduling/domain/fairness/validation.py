"""Problem validation and packing: tenants as given become the vectors of a :class:`._Problem`.

Invariant: a problem that leaves :func:`_validate` obeys every rule (amounts finite, >= 0 and at
most :data:`MAX_AMOUNT`; resources in the capacity; weights > 0; names unique; parents known and
acyclic; each effective guarantee within its limit; the roots' guarantees within the capacity);
the first fault raises :class:`.ProblemError` with the same message whichever path found it
(the bulk :func:`_pack` only accepts, the per-tenant :func:`_precise` names the fault).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from itertools import chain, compress, islice, repeat
from operator import attrgetter, eq, is_, is_not
from typing import Any

import numpy as np

from .model import _EPS, ProblemError, Tenant, _Problem

_PLAIN_NUMBERS = frozenset({float, int})


# Amounts are base units (cores, bytes, devices): 10^18 bytes is an exabyte. Beyond that the
# float arithmetic of progressive filling loses every unit that matters (and ratios overflow).
MAX_AMOUNT = 1e18


def _fmt(value: float) -> str:
    return f"{value:g}"


def _number(value: Any, where: str) -> float:
    """Return ``value`` as a finite float >= 0, or raise ProblemError naming ``where``."""
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        raise ProblemError(f"{where} must be a number, got {value!r}")
    amount = float(value)
    if not math.isfinite(amount):
        raise ProblemError(f"{where} must be finite, got {value!r}")
    if amount < 0:
        raise ProblemError(f"{where} must be >= 0, got {_fmt(amount)}")
    if amount > MAX_AMOUNT:
        raise ProblemError(f"{where} must be at most {MAX_AMOUNT:g}, got {_fmt(amount)}")
    return amount


def _vector(
    amounts: Any, index: dict[str, int], owner: str, what: str, fill: float = 0.0
) -> list[float]:
    """Return ``amounts`` as a vector indexed like ``index``; absent resources get ``fill``."""
    if not isinstance(amounts, Mapping):
        raise ProblemError(f"{owner}: {what} must be a mapping of resource to amount")
    vec = [fill] * len(index)
    for resource, value in amounts.items():
        r = index.get(resource)
        if r is None:
            raise ProblemError(f"{owner}: {what}: unknown resource {resource!r} (not in capacity)")
        vec[r] = _number(value, f"{owner}: {what}[{resource!r}]")
    return vec


def _cut(demand: np.ndarray, limit: np.ndarray) -> np.ndarray:
    """Per row, the factor (<= 1) that brings the demand within the limit along its direction."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(demand > limit, limit / demand, 1.0).min(axis=1, initial=1.0)


def _matrix(rows: list[list[float]], n_res: int) -> np.ndarray:
    """``rows`` as an ``(len(rows), n_res)`` float array (also when ``n_res`` is 0)."""
    return np.array(rows, dtype=float).reshape(len(rows), n_res)


def _plain_matrix(maps: list[Any], index: dict[str, int], fill: float) -> np.ndarray | None:
    """``maps`` as an ``(len(maps), R)`` matrix if they are dicts of known resources to plain
    finite numbers in ``[0, MAX_AMOUNT]`` (absent resources get ``fill``), else ``None``.

    The fast path of :func:`_pack`: every check is column-wise (C loops), and no object is
    created per map.
    """
    n = len(maps)
    if n and set(map(type, maps)) != {dict}:
        return None
    values = list(chain.from_iterable(map(dict.values, maps)))
    if values and not set(map(type, values)) <= _PLAIN_NUMBERS:
        return None
    try:
        columns = list(map(index.__getitem__, chain.from_iterable(maps)))
    except (KeyError, TypeError):  # an unknown resource
        return None
    amounts = np.array(values, dtype=float)
    if not (np.isfinite(amounts).all() and (amounts >= 0.0).all()):
        return None
    if len(amounts) and amounts.max() > MAX_AMOUNT:
        return None
    matrix = np.full((n, len(index)), fill)
    matrix[np.repeat(np.arange(n), list(map(len, maps))), columns] = amounts
    return matrix


def _pack(
    ordered: list[Tenant], index: dict[str, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Weights, demands, guarantees and limits (``inf`` where none) of ``ordered`` tenants.

    The fast path for problems of plain dicts and numbers: every per-tenant rule of
    :func:`_validate` on these fields is checked in bulk, and ``None`` is returned if any fails
    (or anything unexpected is met), so that the per-tenant loop raises the precise error.
    """
    n, n_res = len(ordered), len(index)
    try:
        weights = list(map(attrgetter("weight"), ordered))
        if weights and not set(map(type, weights)) <= _PLAIN_NUMBERS:
            return None
        weight = np.array(weights, dtype=float)
        if not (np.isfinite(weight).all() and (weight > 0.0).all()):
            return None
        demand = _plain_matrix(list(map(attrgetter("demand"), ordered)), index, 0.0)
        if demand is None:
            return None
        guarantee = np.zeros((n, n_res))
        some = list(compress(range(n), map(attrgetter("guarantee"), ordered)))
        if some:
            rows = _plain_matrix([ordered[i].guarantee for i in some], index, 0.0)
            if rows is None:
                return None
            guarantee[some] = rows
        limit = np.full((n, n_res), np.inf)
        some = list(
            compress(range(n), map(is_not, map(attrgetter("limit"), ordered), repeat(None)))
        )
        if some:
            rows = _plain_matrix([ordered[i].limit for i in some], index, np.inf)
            if rows is None:
                return None
            limit[some] = rows
            if (guarantee[some] > rows * (1 + _EPS)).any():
                return None
    except Exception:  # anything odd: let the per-tenant loop decide
        return None
    return weight, demand, guarantee, limit


def _precise(
    names: list[str], ordered: list[Tenant], index: dict[str, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The per-tenant checks, in name order: the first fault raises its own message.

    Return (weight, demand, guarantee, limit, parent) as :func:`_pack` and :func:`_parents` do.
    """
    resources = sorted(index, key=index.__getitem__)
    position = dict(zip(names, range(len(names)), strict=True))
    weight, demand, guarantee, limit, parents = [], [], [], [], []
    inf_row = [math.inf] * len(resources)
    for name, tenant in zip(names, ordered, strict=True):
        owner = f"tenant {name!r}"
        w = tenant.weight
        if isinstance(w, bool) or not isinstance(w, int | float | Decimal):
            raise ProblemError(f"{owner}: weight must be a number, got {w!r}")
        if not math.isfinite(float(w)) or float(w) <= 0:
            raise ProblemError(f"{owner}: weight must be > 0, got {w!r}")
        weight.append(float(w))
        demand.append(_vector(tenant.demand, index, owner, "demand"))
        g = (
            _vector(tenant.guarantee, index, owner, "guarantee")
            if tenant.guarantee
            else [0.0] * len(resources)
        )
        guarantee.append(g)
        lim = (
            inf_row
            if tenant.limit is None
            else _vector(tenant.limit, index, owner, "limit", fill=math.inf)
        )
        limit.append(lim)
        for r, resource in enumerate(resources):
            if g[r] > lim[r] * (1 + _EPS):
                raise ProblemError(
                    f"{owner}: guarantee[{resource!r}] ({_fmt(g[r])}) "
                    f"exceeds limit[{resource!r}] ({_fmt(lim[r])})"
                )
        parent = tenant.parent
        if parent is not None and (not isinstance(parent, str) or parent not in position):
            raise ProblemError(f"{owner}: unknown parent {parent!r}")
        parents.append(-1 if parent is None else position[parent])
    n_res = len(resources)
    return (
        np.array(weight, dtype=float),
        _matrix(demand, n_res),
        _matrix(guarantee, n_res),
        _matrix(limit, n_res),
        np.array(parents, dtype=np.intp),
    )


def _sum_by(index: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    """``(n, R)`` sums of ``rows`` by ``index`` (in row order)."""
    if rows.shape[1] == 0:
        return np.zeros((n, 0))
    return np.stack([np.bincount(index, weights=col, minlength=n) for col in rows.T], axis=1)


def _depths(parent: np.ndarray, names: list[str], ordered: list[Tenant]) -> np.ndarray:
    """Depth of every tenant (roots 0); raise ProblemError if the parents form a cycle."""
    n = len(parent)
    depth = np.zeros(n, dtype=np.intp)
    up = parent.copy()
    # Pointer doubling: after k steps ``jump`` holds the ancestor 2**k levels up (-1 past a root);
    # once 2**k exceeds n, only tenants on or below a cycle still have one.
    jump = parent.copy()
    for _ in range(n.bit_length() + 1):
        live = jump >= 0
        if not live.any():
            break
        jump[live] = jump[jump[live]]
    if not (jump >= 0).any():
        while (climbing := up >= 0).any():
            depth[climbing] += 1
            up[climbing] = parent[up[climbing]]
        return depth
    # On a cycle: name it, starting from the first tenant (by name) that never reaches a root.
    start = names[int(np.flatnonzero(jump >= 0)[0])]
    by_name = dict(zip(names, ordered, strict=True))
    cycle, name = [start], by_name[start].parent
    while name is not None and name != start and name not in cycle:
        cycle.append(name)
        name = by_name[name].parent
    path = " -> ".join(repr(x) for x in [*cycle, name])
    raise ProblemError(f"tenant {start!r}: cycle in parents ({path})")


def _validate(
    capacity: Mapping[str, float], tenants: Sequence[Tenant], integral: Iterable[str]
) -> _Problem:
    """Check every rule of the problem and return it as vectors; raise ProblemError on a fault.

    Rules: amounts are finite and >= 0; resources exist in the capacity; weights are > 0; names
    are unique; parents exist and form no cycle; each (effective) guarantee is within the limit;
    the roots' effective guarantees fit in the capacity. Tenants are numbered in name order.
    """
    if not isinstance(capacity, Mapping):
        raise ProblemError("capacity must be a mapping of resource to amount")
    resources = sorted(capacity)
    for resource in resources:
        if not isinstance(resource, str) or not resource:
            raise ProblemError(f"capacity: resource names must be non-empty strings: {resource!r}")
    index = {resource: r for r, resource in enumerate(resources)}
    cap = [_number(capacity[resource], f"capacity[{resource!r}]") for resource in resources]
    if isinstance(integral, str):
        raise ProblemError("integral must be a list of resource names, got a string")
    integral_idx = []
    for resource in sorted(set(integral)):
        if resource not in index:
            raise ProblemError(f"integral: unknown resource {resource!r} (not in capacity)")
        integral_idx.append(index[resource])

    names, ordered = _ordered(tenants)
    n, n_res = len(names), len(resources)

    packed = _pack(ordered, index)
    parent = None if packed is None else _bulk_parents(names, ordered)
    if packed is None or parent is None:
        *packed, parent = _precise(names, ordered, index)
    weight, own_demand, own_guarantee, limit = packed

    depth = _depths(parent, names, ordered)
    demand, guarantee = _effective(
        names, resources, parent, depth, own_demand, own_guarantee, limit
    )
    totals = guarantee[depth == 0].sum(axis=0) if n else np.zeros(n_res)
    for r, resource in enumerate(resources):
        if totals[r] > cap[r] * (1 + _EPS):
            raise ProblemError(
                f"guarantee[{resource!r}]: sum of guarantees ({_fmt(totals[r])}) exceeds capacity "
                f"({_fmt(cap[r])})"
            )
    return _Problem(
        resources=resources,
        capacity=cap,
        integral=integral_idx,
        names=names,
        weight=weight,
        demand=demand,
        own_demand=own_demand,
        floor=np.minimum(guarantee, demand),  # the guarantee, up to the demand
        limit=limit,
        parent=parent,
        depth=depth,
        own_guarantee=own_guarantee,
    )


def _ordered(tenants: Sequence[Tenant]) -> tuple[list[str], list[Tenant]]:
    """The tenants' names, sorted, and the tenants in that order; raise ProblemError on a
    tenant that is not a :class:`.Tenant`, a bad name or a duplicate (in the given order)."""
    tenants = tenants if type(tenants) is list else list(tenants)
    ordered = None
    if all(map(isinstance, tenants, repeat(Tenant))):
        given = list(map(attrgetter("name"), tenants))
        if set(map(type, given)) <= {str} and all(given):
            ordered = sorted(tenants, key=attrgetter("name"))
            names = list(map(attrgetter("name"), ordered))
            if any(map(eq, names, islice(names, 1, None))):  # a duplicate: named below
                ordered = None
    if ordered is None:
        by_name: dict[str, Tenant] = {}
        for tenant in tenants:
            if not isinstance(tenant, Tenant):
                raise ProblemError(f"tenants must be Tenant objects, got {tenant!r}")
            if not isinstance(tenant.name, str) or not tenant.name:
                raise ProblemError(f"tenant name must be a non-empty string, got {tenant.name!r}")
            if tenant.name in by_name:
                raise ProblemError(f"tenant {tenant.name!r}: duplicate name")
            by_name[tenant.name] = tenant
        names = sorted(by_name)
        ordered = list(map(by_name.__getitem__, names))
    return names, ordered


def _bulk_parents(names: list[str], ordered: list[Tenant]) -> np.ndarray | None:
    """Each tenant's parent's number (-1 for the roots), found in bulk; ``None`` if a parent
    is unknown or not a name (the per-tenant path then names the fault)."""
    n = len(names)
    raw_parents = list(map(attrgetter("parent"), ordered))
    if all(map(is_, raw_parents, repeat(None))):
        return np.full(n, -1, dtype=np.intp)
    # Few distinct parents: find each in the sorted names (unknown ones: precise path).
    position: dict[str | None, int] = {None: -1}
    try:
        for p in set(raw_parents) - {None}:
            i = bisect_left(names, p)
            if i == n or names[i] != p:
                raise KeyError(p)
            position[p] = i
        return np.array(list(map(position.__getitem__, raw_parents)), dtype=np.intp)
    except (KeyError, TypeError):
        return None


def _effective(
    names: list[str],
    resources: list[str],
    parent: np.ndarray,
    depth: np.ndarray,
    own_demand: np.ndarray,
    own_guarantee: np.ndarray,
    limit: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Effective demands and guarantees, deepest tenants first: a parent adds up what its
    children can use and their guarantees; raise ProblemError where the children's guarantees
    exceed the parent's limit."""
    n = len(names)
    demand, guarantee = own_demand, own_guarantee
    if n and depth.max() > 0:
        demand, guarantee = own_demand.copy(), own_guarantee.copy()
        for level in range(int(depth.max()), 0, -1):
            kids = np.flatnonzero(depth == level)
            up = parent[kids]
            kid_demand, kid_guarantee = demand[kids], guarantee[kids]
            # What a child can use: its demand cut down to its limit, or its floor if larger.
            cut = _cut(kid_demand, limit[kids])[:, None]
            usable = np.where(
                cut < 1.0,
                np.maximum(np.minimum(kid_guarantee, kid_demand), cut * kid_demand),
                kid_demand,
            )
            demand += _sum_by(up, usable, n)
            ups = np.flatnonzero(np.bincount(up, minlength=n))
            kids_guarantee = _sum_by(up, kid_guarantee, n)[ups]
            over = kids_guarantee > limit[ups] * (1 + _EPS)
            if over.any():
                k, r = (int(x[0]) for x in np.nonzero(over))
                raise ProblemError(
                    f"tenant {names[ups[k]]!r}: its children's guarantees of {resources[r]!r} "
                    f"({_fmt(kids_guarantee[k, r])}) exceed its limit ({_fmt(limit[ups[k], r])})"
                )
            guarantee[ups] = np.maximum(own_guarantee[ups], kids_guarantee)
    return demand, guarantee
