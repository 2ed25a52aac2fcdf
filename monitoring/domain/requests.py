"""A pod's effective request per resource, as the scheduler computes it (pure).

Shared by the usage aggregation (pods) and the workload collector (a Kueue Workload's pod
templates): ``pod_request`` follows ``k8s.io/component-helpers/resource`` ``PodRequests``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

__all__ = ["pod_request"]

Resources = dict[str, Decimal]
ParseQuantity = Callable[[Any], Decimal]


def _add_into(total: Resources, amounts: Mapping[str, Decimal]) -> None:
    for name, amount in amounts.items():
        total[name] = total[name] + amount if name in total else amount


def _max_into(peak: Resources, amounts: Mapping[str, Decimal]) -> None:
    for name, amount in amounts.items():
        if name not in peak or amount > peak[name]:
            peak[name] = amount


def _parse_resources(raw: Mapping[str, Any] | None, parse: ParseQuantity) -> Resources:
    if not raw:
        return {}
    return {name: parse(quantity) for name, quantity in raw.items()}


def _container_request(container: Mapping[str, Any], parse: ParseQuantity) -> Resources:
    """Requests of one container, each defaulting to its limit when only the limit is set."""
    resources = container.get("resources")
    if not resources:
        return {}
    requests = resources.get("requests")
    limits = resources.get("limits")
    if not limits:
        return _parse_resources(requests, parse)
    merged = _parse_resources(limits, parse)
    # An explicit request wins over the limit, even an explicit "0".
    merged.update(_parse_resources(requests, parse))
    return merged


def pod_request(pod: Mapping[str, Any], parse_quantity: ParseQuantity) -> Resources:
    """Return the pod's effective request per resource, as the scheduler computes it.

    Steps:
    1. Sum the regular containers' requests (each defaulting to its limit).
    2. Walk ``initContainers`` in order. A sidecar (``restartPolicy: Always``) is added to the
       running sum of step 1 and to the running sum of sidecars; its own start-up peak is that
       running sum of sidecars. A regular init container's peak is its request plus the sidecars
       declared before it.
    3. Take, per resource, the max of the step-1 sum and every init peak; add ``spec.overhead``.

    Invariants: every value is ≥ 0 when the inputs are; a resource appears iff some container,
    init container or the overhead names it. The pod's phase is not looked at.
    """
    spec = pod.get("spec") or {}
    total: Resources = {}
    for container in spec.get("containers") or ():
        _add_into(total, _container_request(container, parse_quantity))

    init_containers = spec.get("initContainers")
    if init_containers:
        sidecars: Resources = {}
        init_peak: Resources = {}
        for container in init_containers:
            request = _container_request(container, parse_quantity)
            if container.get("restartPolicy") == "Always":
                _add_into(total, request)
                _add_into(sidecars, request)
                _max_into(init_peak, sidecars)
            else:
                starting = dict(sidecars)
                _add_into(starting, request)
                _max_into(init_peak, starting)
        _max_into(total, init_peak)

    overhead = spec.get("overhead")
    if overhead:
        _add_into(total, _parse_resources(overhead, parse_quantity))
    return total
