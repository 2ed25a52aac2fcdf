"""ResourceQuota admission for ``resource.k8s.io/v1`` ResourceClaims, as the fake imitates it.

Upstream (kubernetes/kubernetes master):

* the charge of one claim is ``pkg/quota/v1/evaluator/core/resource_claims.go``
  ``claimEvaluator.Usage``: ``count/resourceclaims.resource.k8s.io`` = 1 and, per device
  class, ``<class>.deviceclass.resource.k8s.io/devices`` (``V1ResourceByDeviceClass``):
  an ``exactly`` request adds its ``count`` (defaulted to 1, ``allocationMode`` defaulted to
  ExactCount) or, for ``All``, ``AllocationResultsMaxSize`` = 32 ("Worst case..."); a
  ``firstAvailable`` request adds, for *every* device class its subrequests name, the largest
  subrequest of that class; unknown modes count 0. Admin access is no exemption. Its tests
  (``resource_claims_test.go`` ``TestResourceClaimEvaluatorUsage``): ``simple`` (1),
  ``many-requests`` (two requests of one class add up), ``count`` (5), ``all`` (32),
  ``unknown-count-mode`` (0), ``admin`` (charged like any other), ``prioritized-list``,
  ``prioritized-list-multiple-subrequests`` (counts 2 and 1 of one class → 2),
  ``prioritized-list-allocation-mode-all`` (1 and All → 32),
  ``prioritized-list-different-device-classes`` (gpu 1, tpu All → gpu 1 and tpu 32).
* which quotas apply is ``claimEvaluator.Matches`` (``generic.Matches`` with
  ``MatchesNoScopeFunc``): a quota whose hard names ``count/resourceclaims.resource.k8s.io``
  or a ``...deviceclass.resource.k8s.io/devices`` key, and which has no scopes.
* the check is ``plugin/pkg/admission/resourcequota/controller.go`` ``checkRequest``: the
  charge masked to the quota's hard names is added to ``used``; if a name goes over ``hard``,
  the request is refused with ``exceeded quota: %s, requested: %s, used: %s, limited: %s``
  (each a ``prettyPrint``: sorted ``name=quantity`` joined by ``,``) as
  ``admission.NewForbidden``: 403 ``<resource> "<name>" is forbidden: ...``.

Simplifications: ``hard`` is read from ``spec.hard`` and ``used`` is computed from the claims in
the namespace at the time of the request (a quota controller that is never behind); claims are
charged on CREATE only (their spec is immutable).

Deliberately independent of Fairshare's own ``monitoring.domain.dra`` (the fake must not import
product code): the two implementations check each other in the tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from .validation import parse_quantity

# staging/src/k8s.io/api/resource/v1/types.go AllocationResultsMaxSize
ALLOCATION_RESULTS_MAX_SIZE = 32
# resource_claims.go ClaimObjectCountName (generic.ObjectCountQuotaResourceNameFor)
CLAIM_COUNT = "count/resourceclaims.resource.k8s.io"
# resource_claims.go V1ResourceByDeviceClass: class + corev1.ResourceClaimsPerClass
DEVICE_CLASS_SUFFIX = ".deviceclass.resource.k8s.io/devices"


def _num_devices(request: Mapping[str, Any]) -> int:
    mode = request.get("allocationMode") or "ExactCount"  # SetDefaults_ExactDeviceRequest
    if mode == "ExactCount":
        count = request.get("count")
        return 1 if count is None else int(count)
    if mode == "All":
        return ALLOCATION_RESULTS_MAX_SIZE
    return 0  # "Could happen after a downgrade": unknown modes don't count


def claim_usage(claim: Mapping[str, Any]) -> dict[str, int]:
    """``claimEvaluator.Usage``: what one claim charges, by quota resource name."""
    usage = {CLAIM_COUNT: 1}
    requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or ()
    for request in requests:
        subrequests = request.get("firstAvailable") or ()
        if subrequests:
            largest: dict[str, int] = {}
            for sub in subrequests:
                key = str(sub.get("deviceClassName") or "") + DEVICE_CLASS_SUFFIX
                n = _num_devices(sub)
                if n > largest.get(key, 0):  # q.Cmp(max) > 0: a 0 is never recorded
                    largest[key] = n
            for key, n in largest.items():
                usage[key] = usage.get(key, 0) + n
            continue
        exactly = request.get("exactly")
        if exactly:
            key = str(exactly.get("deviceClassName") or "") + DEVICE_CLASS_SUFFIX
            usage[key] = usage.get(key, 0) + _num_devices(exactly)
    return usage


def _claim_resource(name: str) -> bool:
    """``claimEvaluator.MatchingResources``."""
    return name == CLAIM_COUNT or name.endswith(DEVICE_CLASS_SUFFIX)


def matches(quota: Mapping[str, Any]) -> bool:
    """``generic.Matches`` with ``MatchesNoScopeFunc``: a claim resource in hard, no scopes."""
    spec = quota.get("spec") or {}
    if spec.get("scopes") or (spec.get("scopeSelector") or {}).get("matchExpressions"):
        return False
    return any(_claim_resource(name) for name in spec.get("hard") or {})


def _quantity(value: Decimal) -> str:
    return str(int(value)) if value == value.to_integral_value() else str(value.normalize())


def _pretty(values: Mapping[str, Decimal]) -> str:
    """``prettyPrint``: sorted ``name=quantity``, comma-joined."""
    return ",".join(f"{name}={_quantity(values[name])}" for name in sorted(values))


def used(quota: Mapping[str, Any], claims: Iterable[Mapping[str, Any]]) -> dict[str, Decimal]:
    """What ``status.used`` would hold for the quota's claim resources."""
    names = [n for n in (quota.get("spec") or {}).get("hard") or {} if _claim_resource(n)]
    total = dict.fromkeys(names, Decimal(0))
    for claim in claims:
        for name, n in claim_usage(claim).items():
            if name in total:
                total[name] += n
    return total


def check_create(
    claim: Mapping[str, Any],
    quotas: Iterable[Mapping[str, Any]],
    claims: Iterable[Mapping[str, Any]],
) -> str | None:
    """``checkRequest`` for a claim CREATE: the refusal's text, or None when it fits.

    ``quotas`` are the ResourceQuotas of the claim's namespace (in name order, as the quota
    lister gives them), ``claims`` the claims already stored there.
    """
    delta = claim_usage(claim)
    claims = list(claims)
    for quota in quotas:
        if not matches(quota):
            continue
        hard_raw = (quota.get("spec") or {}).get("hard") or {}
        hard = {name: parse_quantity(value) or Decimal(0) for name, value in hard_raw.items()}
        requested = {name: Decimal(n) for name, n in delta.items() if name in hard}
        current = used(quota, claims)
        exceeded = sorted(
            name for name, n in requested.items() if current.get(name, Decimal(0)) + n > hard[name]
        )
        if exceeded:
            return (
                f"exceeded quota: {(quota.get('metadata') or {}).get('name')}, "
                f"requested: {_pretty({n: requested[n] for n in exceeded})}, "
                f"used: {_pretty({n: current.get(n, Decimal(0)) for n in exceeded})}, "
                f"limited: {_pretty({n: hard[n] for n in exceeded})}"
            )
    return None
