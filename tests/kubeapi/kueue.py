"""Kueue's admission webhooks and the finalizer duties of its controllers, as the fake API server
imitates them.

Pure functions over plain dicts, like ``volcano.py``; ``server.py`` calls them around each write.
Each one names the upstream file and function it follows (kubernetes-sigs/kueue at commit
ff69552e79ad21652c36caa97038382e55625cf7, the one the CRDs next to this module are copied from),
with Kueue's feature gates at their defaults there (``pkg/features/kube_features.go``, see
:data:`FEATURES`). The CRD schemas and their CEL rules are ``validation.py``'s and ``cel.py``'s
business: as on a real API server they run before the validating webhooks (mutating admission,
then the object's validation, then validating admission), so a rule both check (preemption,
flavor fungibility, ``borrowingLimit`` without a cohort) is answered by the CRD's rule.

Webhooks (``pkg/webhooks/``; the names are their ``+kubebuilder:webhook`` markers):

* ``mclusterqueue.kb.io`` — ``clusterqueue_webhook.go`` ``ClusterQueueWebhook.Default``
  (CREATE): the finalizer ``kueue.x-k8s.io/resource-in-use`` (:func:`default_clusterqueue`);
* ``vclusterqueue.kb.io`` — ``ValidateClusterQueue``/``ValidateClusterQueueUpdate`` and what they
  call (:func:`validate_clusterqueue`);
* ``vcohort.kb.io`` — ``cohort_webhook.go`` ``validateCohort`` (:func:`validate_cohort`);
* ``mresourceflavor.kb.io``/``vresourceflavor.kb.io`` — ``resourceflavor_webhook.go``
  ``ResourceFlavorWebhook.Default`` (the same finalizer) and ``ValidateResourceFlavor``;
* ``mworkload.kb.io``/``vworkload.kb.io`` — ``workload_webhook.go`` ``WorkloadWebhook.Default``,
  ``ValidateWorkload``/``ValidateWorkloadUpdate`` (:func:`validate_workload`; the parts that
  only look at a status the fake never lets a client change are left out, see there);
* LocalQueue: ``webhooks.go`` ``setupWebhookForLocalQueue`` registers neither a defaulter nor a
  validator, so there is no LocalQueue webhook; its ``spec.clusterQueue`` is immutable through
  the CRD's CEL rule ``self == oldSelf``. WorkloadPriorityClass has no webhook either.

A denial is controller-runtime's ``admission.Denied`` with the aggregated ``field.ErrorList``
(``ToAggregate``: one error, or ``[e1, e2]``): the API server answers 403 Forbidden,
``admission webhook "<name>" denied the request: <errors>`` (``k8s.io/apiserver`` ``pkg/admission/
plugin/webhook/errors/statuserror.go`` ``ToStatusErr``). Bad values print as ``field.Error``
prints them (``k8s.io/apimachinery/pkg/util/validation/field/errors.go`` ``ErrorBody``): Go
strings quoted, ``corev1.ResourceName`` bare (it is a ``fmt.Stringer``), quantities in their
canonical form (``resource.Quantity.String``, :func:`quantity_string`); Go structs, printed
with ``%#v`` upstream, are shown as JSON.

Controllers (:func:`clusterqueue_releasable`, :func:`resourceflavor_users`):
``pkg/controller/core/clusterqueue_controller.go`` ``ClusterQueueReconciler.Reconcile`` adds the
finalizer to a ClusterQueue that lacks it and, once the ClusterQueue is being deleted, removes it
when ``cache.ClusterQueueEmpty`` (``pkg/cache/scheduler/cache.go``): no Workload is in the
ClusterQueue's cache entry, i.e. none whose ``status.admission.clusterQueue`` names it and that
``workload.HasActiveQuotaReservation`` (``pkg/workload/workload.go``: the ``QuotaReserved``
condition is True, the ``Finished`` condition is not, ``spec.active`` is not false);
``resourceflavor_controller.go`` ``ResourceFlavorReconciler.Reconcile`` does the same for a
ResourceFlavor once no ClusterQueue lists it in ``spec.resourceGroups[].flavors``
(``cache.ClusterQueuesUsingFlavor``, ``clusterQueue.flavorInUse``; a terminating ClusterQueue
still counts until it is gone).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from decimal import ROUND_CEILING, Decimal
from typing import Any

from .validation import parse_quantity

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
API_VERSION = f"{GROUP}/{VERSION}"
# apis/kueue/v1beta2/constants.go ResourceInUseFinalizerName
FINALIZER = "kueue.x-k8s.io/resource-in-use"
CONTROLLER = "kueue"
# pkg/constants/constants.go
ADMISSION_GATED_BY = "kueue.x-k8s.io/admission-gated-by"
ELASTIC_JOB = "kueue.x-k8s.io/elastic-job"

# The feature gates these webhooks consult, at their defaults for this commit
# (pkg/features/kube_features.go defaultVersionedFeatureGates).
FEATURES = {
    "PartialAdmission": True,  # beta since 0.5
    "ConcurrentAdmission": False,  # alpha
    "RejectUpdatesToCQWithInvalidOnFlavors": False,  # alpha
    "WorkloadValidationForPodSetMetadata": True,  # beta
    "WorkloadValidateResourcesAreNonNegative": True,  # beta
    "TASValidateWorkloadSliceSize": True,  # beta
    "ElasticJobsViaWorkloadSlices": True,  # beta since 0.18
    "AdmissionGatedBy": True,  # beta since 0.19
    "PriorityBoost": False,  # alpha
}

# The webhook configurations' names (the +kubebuilder:webhook markers' name=).
MUTATING = {
    "ClusterQueue": "mclusterqueue.kb.io",
    "ResourceFlavor": "mresourceflavor.kb.io",
    "Workload": "mworkload.kb.io",
}
VALIDATING = {
    "ClusterQueue": "vclusterqueue.kb.io",
    "Cohort": "vcohort.kb.io",
    "ResourceFlavor": "vresourceflavor.kb.io",
    "Workload": "vworkload.kb.io",
}


class Denied(Exception):
    """The webhook refused the request; the message is the aggregated field errors."""


# --------------------------------------------------------------------------- field errors


def _q(value: str) -> str:
    """Go's ``%q`` of a string (strconv.Quote, printable runes kept)."""
    return json.dumps(value, ensure_ascii=False)


def _invalid(path: str, shown: str, detail: str) -> str:
    return f"{path}: Invalid value: {shown}: {detail}"


def _aggregate(errors: list[str]) -> None:
    """``field.ErrorList.ToAggregate`` → Denied (nothing when the list is empty)."""
    if errors:
        raise Denied(errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")


def _spec(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    spec = (obj or {}).get("spec")
    return spec if isinstance(spec, Mapping) else {}


# k8s.io/apimachinery/pkg/util/validation/validation.go: the texts of IsQualifiedName,
# IsDNS1123Subdomain and IsValidLabelValue (RegexError, MaxLenError, EmptyError).
_QNAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QNAME = re.compile(f"^{_QNAME_FMT}$")
_QNAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character"
)
_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN = re.compile(f"^{_DNS1123_SUBDOMAIN_FMT}$")
_LABEL_VALUE_FMT = f"({_QNAME_FMT})?"
_LABEL_VALUE = re.compile(f"^{_LABEL_VALUE_FMT}$")
_HTTP_PATH_FMT = "[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+"
_HTTP_PATH = re.compile(f"^{_HTTP_PATH_FMT}$")


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def is_dns1123_subdomain(value: str) -> list[str]:
    errs = []
    if len(value) > 253:
        errs.append("must be no more than 253 characters")
    if not _DNS1123_SUBDOMAIN.match(value):
        errs.append(
            _regex_error(
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                "characters, '-' or '.', and must start and end with an alphanumeric character",
                _DNS1123_SUBDOMAIN_FMT,
                "example.com",
            )
        )
    return errs


def is_qualified_name(value: str) -> list[str]:
    """``IsQualifiedName`` (what ``content.IsLabelKey`` and ``ValidateLabelName`` check)."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs += [f"prefix part {m}" for m in is_dns1123_subdomain(prefix)]
    else:
        return [
            "a qualified name "
            + _regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    if not _QNAME.match(name):
        errs.append(
            "name part " + _regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc")
        )
    return errs


def is_valid_label_value(value: str) -> list[str]:
    errs = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if not _LABEL_VALUE.match(value):
        errs.append(
            _regex_error(
                "a valid label must be an empty string or consist of alphanumeric characters, "
                "'-', '_' or '.', and must start and end with an alphanumeric character",
                _LABEL_VALUE_FMT,
                "MyValue",
                "my_value",
                "12345",
            )
        )
    return errs


def validate_labels(labels: Any, path: str) -> list[str]:
    """``k8s.io/apimachinery/pkg/apis/meta/v1/validation`` ``ValidateLabels``: every key a
    qualified name, every value a label value (errors at the map's path; keys sorted, where Go
    ranges over the map in random order)."""
    errors = []
    for key, value in sorted((labels or {}).items()):
        errors += [_invalid(path, _q(key), m) for m in is_qualified_name(key)]
        errors += [_invalid(path, _q(str(value)), m) for m in is_valid_label_value(str(value))]
    return errors


def _validate_label_name(name: str, path: str) -> list[str]:
    """``ValidateLabelName``."""
    return [_invalid(path, _q(name), m) for m in is_qualified_name(name)]


def validate_annotations(annotations: Any, path: str) -> list[str]:
    """``k8s.io/apimachinery/pkg/api/validation/objectmeta.go`` ``ValidateAnnotations``: keys
    are qualified names (lower-cased first), and the total size is at most 256 KiB."""
    errors = []
    total = 0
    for key, value in sorted((annotations or {}).items()):
        errors += [_invalid(path, _q(key), m) for m in is_qualified_name(key.lower())]
        total += len(key) + len(str(value))
    if total > 256 * 1024:
        errors.append(f"{path}: Too long: may not be more than {256 * 1024} bytes")
    return errors


def validate_label_selector(selector: Any, path: str) -> list[str]:
    """``ValidateLabelSelector`` and ``ValidateLabelSelectorRequirement`` (default options)."""
    if not isinstance(selector, Mapping):
        return []
    errors = validate_labels(selector.get("matchLabels"), f"{path}.matchLabels")
    for i, req in enumerate(selector.get("matchExpressions") or ()):
        base = f"{path}.matchExpressions[{i}]"
        operator = req.get("operator")
        values = req.get("values") or []
        if operator in ("In", "NotIn"):
            if not values:
                errors.append(
                    f"{base}.values: Required value: must be specified when `operator` is 'In' "
                    "or 'NotIn'"
                )
        elif operator in ("Exists", "DoesNotExist"):
            if values:
                errors.append(
                    f"{base}.values: Forbidden: may not be specified when `operator` is "
                    "'Exists' or 'DoesNotExist'"
                )
        else:
            errors.append(
                _invalid(f"{base}.operator", _q(str(operator)), "not a valid selector operator")
            )
        errors += _validate_label_name(str(req.get("key") or ""), f"{base}.key")
        for j, value in enumerate(values):
            errors += [
                _invalid(f"{base}.values[{j}]", _q(value), m) for m in is_valid_label_value(value)
            ]
    return errors


# --------------------------------------------------------------------------- quantities

_DECIMAL_SUFFIXES = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P"}
_DECIMAL_SUFFIXES[18] = "E"
_BINARY_SUFFIXES = {0: "", 10: "Ki", 20: "Mi", 30: "Gi", 40: "Ti", 50: "Pi", 60: "Ei"}


def _quantity(value: Any) -> Decimal | None:
    return parse_quantity(value)


def quantity_string(value: Any) -> str:
    """``resource.Quantity.String`` (``k8s.io/apimachinery/pkg/api/resource/quantity.go``
    ``CanonicalizeBytes``): the canonical form of a quantity, as a webhook's error shows it
    (``1.5`` → ``1500m``, ``1000`` → ``1k``, ``1024Mi`` → ``1Gi``)."""
    text = str(value).strip()
    amount = _quantity(text)
    if amount is None:
        return text
    # ParseQuantity rounds up to nano precision.
    amount = amount.quantize(Decimal("1e-9"), rounding=ROUND_CEILING).normalize()
    if amount == 0:
        return "0"
    binary = bool(re.search(r"[KMGTPE]i$", text))
    exponent_format = bool(re.search(r"[eE][-+]?[0-9]+$", text)) and not binary
    if binary and abs(amount) >= 1024 and amount == amount.to_integral_value():
        mantissa, power = int(amount), 0
        while mantissa % 1024 == 0 and power < 60:
            mantissa //= 1024
            power += 10
        return f"{mantissa}{_BINARY_SUFFIXES[power]}"
    sign, digits, exp = amount.as_tuple()
    mantissa = int("".join(map(str, digits)))
    exponent = int(exp)
    while mantissa and mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    shift = exponent % 3  # Python's modulo: lower the exponent to a multiple of three
    mantissa *= 10**shift
    exponent -= shift
    number = f"{'-' if sign else ''}{mantissa}"
    if exponent_format:
        return number if exponent == 0 else f"{number}e{exponent}"
    suffix = _DECIMAL_SUFFIXES.get(exponent)
    return number + (suffix if suffix is not None else f"e{exponent}")


# --------------------------------------------------------------------------- ClusterQueue


def _add_finalizer(obj: dict[str, Any]) -> None:
    """``controllerutil.AddFinalizer`` when ``ContainsFinalizer`` says it is missing."""
    meta = obj.setdefault("metadata", {})
    finalizers = list(meta.get("finalizers") or [])
    if FINALIZER not in finalizers:
        meta["finalizers"] = [*finalizers, FINALIZER]


def default_clusterqueue(cq: dict[str, Any]) -> None:
    """``clusterqueue_webhook.go`` ``ClusterQueueWebhook.Default`` (``mclusterqueue.kb.io``,
    CREATE only): add the ``kueue.x-k8s.io/resource-in-use`` finalizer."""
    _add_finalizer(cq)


def validate_clusterqueue(cq: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> None:
    """``clusterqueue_webhook.go`` ``ValidateClusterQueue`` (CREATE) and
    ``ValidateClusterQueueUpdate`` (UPDATE; ``old`` is the stored object). Raises Denied."""
    errors = _validate_clusterqueue_spec(cq)
    if old is None:
        errors += _validate_admission_check_on_flavors(cq, {})
    else:
        errors += _validate_admission_check_on_flavors_update(old, cq)
        # apimachineryvalidation.ValidateImmutableField(spec.concurrentAdmissionPolicy)
        new_policy = _spec(cq).get("concurrentAdmissionPolicy")
        if new_policy != _spec(old).get("concurrentAdmissionPolicy"):
            errors.append(
                _invalid(
                    "spec.concurrentAdmissionPolicy", json.dumps(new_policy), "field is immutable"
                )
            )
    _aggregate(errors)


def _validate_clusterqueue_spec(cq: Mapping[str, Any]) -> list[str]:
    """``validateClusterQueueSpec``."""
    spec = _spec(cq)
    groups = spec.get("resourceGroups") or []
    has_parent = bool(spec.get("cohortName"))
    errors = validate_resource_groups(
        groups, "spec.resourceGroups", has_parent=has_parent, enforce_lending=True, cohort=False
    )
    errors += validate_label_selector(spec.get("namespaceSelector"), "spec.namespaceSelector")
    if spec.get("preemption") is not None:
        errors += _validate_preemption(spec["preemption"], "spec.preemption")
    if spec.get("flavorFungibility") is not None:
        errors += _validate_flavor_fungibility(spec["flavorFungibility"], "spec.flavorFungibility")
    errors += validate_fair_sharing(spec.get("fairSharing"), "spec.fairSharing")
    errors += _validate_totals(groups, "spec.resourceGroups")
    errors += _validate_concurrent_admission_policy(spec, "spec")
    return errors


def _all_flavors(groups: Iterable[Mapping[str, Any]]) -> set[str]:
    """``pkg/util/queue`` ``AllFlavors``: every flavor name of the resource groups."""
    return {
        str(f.get("name"))
        for g in groups or ()
        for f in (g.get("flavors") or ())
        if f.get("name") is not None
    }


def _validate_admission_check_on_flavors(
    cq: Mapping[str, Any], old_on_flavors: Mapping[str, set[str]]
) -> list[str]:
    """``validateAdmissionCheckOnFlavorsWithOld``: each ``onFlavors`` entry of
    ``spec.admissionChecksStrategy.admissionChecks`` names a flavor of the ClusterQueue; a check
    whose ``onFlavors`` are as they were (``old_on_flavors``) is let through."""
    strategy = _spec(cq).get("admissionChecksStrategy")
    if not isinstance(strategy, Mapping):
        return []
    valid = _all_flavors(_spec(cq).get("resourceGroups") or [])
    allowed = ", ".join(_q(f) for f in sorted(valid))
    errors = []
    for i, check in enumerate(strategy.get("admissionChecks") or ()):
        on_flavors = list(check.get("onFlavors") or ())
        name = check.get("name")
        if name in old_on_flavors and old_on_flavors[name] == set(on_flavors):
            continue
        for j, flavor in enumerate(on_flavors):
            if flavor in valid:
                continue
            path = f"spec.admissionChecksStrategy.admissionChecks[{i}].onFlavors[{j}]"
            detail = f": supported values: {allowed}" if allowed else ""
            errors.append(f"{path}: Unsupported value: {_q(flavor)}{detail}")
    return errors


def _validate_admission_check_on_flavors_update(
    old: Mapping[str, Any], new: Mapping[str, Any]
) -> list[str]:
    """``validateAdmissionCheckOnFlavorsUpdate``: with ``RejectUpdatesToCQWithInvalidOnFlavors``
    off (its default), a ClusterQueue whose flavors did not change keeps the ``onFlavors`` it
    already had, valid or not."""
    old_on: dict[str, set[str]] = {}
    if not FEATURES["RejectUpdatesToCQWithInvalidOnFlavors"]:
        strategy = _spec(old).get("admissionChecksStrategy")
        same_flavors = _all_flavors(_spec(old).get("resourceGroups") or []) == _all_flavors(
            _spec(new).get("resourceGroups") or []
        )
        if isinstance(strategy, Mapping) and same_flavors:
            old_on = {
                c.get("name"): set(c.get("onFlavors") or ())
                for c in strategy.get("admissionChecks") or ()
            }
    return _validate_admission_check_on_flavors(new, old_on)


def _validate_totals(groups: list[Mapping[str, Any]], path: str) -> list[str]:
    """``validateTotalFlavors``, ``validateTotalCoveredResources`` and
    ``validateFlavorResourceCombinations``."""
    errors = []
    flavors = sum(len(g.get("flavors") or ()) for g in groups)
    if flavors > 256:
        errors.append(
            _invalid(
                path,
                str(flavors),
                f"total number of flavors across all resourceGroups must be ≤ 256, got {flavors}",
            )
        )
    covered = sum(len(g.get("coveredResources") or ()) for g in groups)
    if covered > 256:
        errors.append(
            _invalid(
                path,
                str(covered),
                "total number of covered resources across all resourceGroups must be ≤ 256, "
                f"got {covered}",
            )
        )
    for i, group in enumerate(groups):
        total = sum(len(f.get("resources") or ()) for f in group.get("flavors") or ())
        if total > 512:
            errors.append(
                _invalid(
                    f"{path}[{i}]",
                    str(total),
                    "number of flavor-resource combinations in a resourceGroup must be ≤ 512, "
                    f"got {total}",
                )
            )
    return errors


def _validate_concurrent_admission_policy(spec: Mapping[str, Any], path: str) -> list[str]:
    """``validateConcurrentAdmissionPolicy``: only with the ``ConcurrentAdmission`` gate
    (alpha, off by default), so nothing is checked here by default."""
    if not FEATURES["ConcurrentAdmission"] or spec.get("concurrentAdmissionPolicy") is None:
        return []
    errors = []
    groups = spec.get("resourceGroups") or []
    if len(groups) != 1:
        errors.append(
            _invalid(
                f"{path}.resourceGroups",
                str(len(groups)),
                "must have exactly one ResourceGroup when ConcurrentAdmissionPolicy is defined",
            )
        )
    if len(groups) == 1 and len(groups[0].get("flavors") or ()) > 16:
        errors.append(
            _invalid(
                f"{path}.resourceGroups[0].flavors",
                str(len(groups[0]["flavors"])),
                "cannot have more than 16 resource flavors in the ResourceGroup when "
                "ConcurrentAdmissionPolicy is defined",
            )
        )
    if spec.get("queueingStrategy") == "StrictFIFO":
        errors.append(
            _invalid(
                f"{path}.queueingStrategy",
                _q("StrictFIFO"),
                "StrictFIFO queueing strategy cannot be used when ConcurrentAdmissionPolicy is "
                "defined",
            )
        )
    return errors


def _validate_preemption(preemption: Mapping[str, Any], path: str) -> list[str]:
    """``validatePreemption`` (the CRD's CEL rule on ``spec.preemption`` refuses this first)."""
    borrow = preemption.get("borrowWithinCohort")
    if (
        preemption.get("reclaimWithinCohort") == "Never"
        and isinstance(borrow, Mapping)
        and borrow.get("policy") != "Never"
    ):
        return [
            _invalid(
                path,
                json.dumps(preemption, separators=(",", ":")),
                "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never",
            )
        ]
    return []


def _validate_flavor_fungibility(fungibility: Mapping[str, Any], path: str) -> list[str]:
    """``validateFlavorFungibility`` (also the CRD's CEL rule on ``spec.flavorFungibility``)."""
    preference = fungibility.get("preference")
    if preference is None:
        return []
    if (
        fungibility.get("whenCanBorrow") != "TryNextFlavor"
        or fungibility.get("whenCanPreempt") != "TryNextFlavor"
    ):
        return [
            _invalid(
                f"{path}.preference",
                _q(preference),
                f"preference {_q(preference)} requires both whenCanBorrow and whenCanPreempt "
                "to be TryNextFlavor",
            )
        ]
    return []


def validate_resource_groups(
    groups: list[Mapping[str, Any]],
    path: str,
    *,
    has_parent: bool,
    enforce_lending: bool,
    cohort: bool,
) -> list[str]:
    """``clusterqueue_webhook.go`` ``validateResourceGroups`` (ClusterQueues and Cohorts): covered
    resources are label keys and unique across the groups, flavors are unique across them, and
    each flavor's quotas pass ``validateFlavorQuotas``."""
    errors: list[str] = []
    seen_resources: set[str] = set()
    seen_flavors: set[str] = set()
    for i, group in enumerate(groups or ()):
        base = f"{path}[{i}]"
        covered = list(group.get("coveredResources") or ())
        for j, name in enumerate(covered):
            at = f"{base}.coveredResources[{j}]"
            # common.go validateResourceName: content.IsLabelKey
            errors += [_invalid(at, str(name), m) for m in is_qualified_name(str(name))]
            if name in seen_resources:
                errors.append(f"{at}: Duplicate value: {name}")
            else:
                seen_resources.add(name)
        for j, flavor in enumerate(group.get("flavors") or ()):
            at = f"{base}.flavors[{j}]"
            errors += _validate_flavor_quotas(
                flavor,
                covered,
                at,
                has_parent=has_parent,
                enforce_lending=enforce_lending,
                cohort=cohort,
            )
            name = flavor.get("name")
            if name in seen_flavors:
                errors.append(f"{at}.name: Duplicate value: {_q(str(name))}")
            else:
                seen_flavors.add(name)
    return errors


def _validate_flavor_quotas(
    flavor: Mapping[str, Any],
    covered: list[str],
    path: str,
    *,
    has_parent: bool,
    enforce_lending: bool,
    cohort: bool,
) -> list[str]:
    """``validateFlavorQuotas``: resource names in ``coveredResources`` order, non-negative
    quantities (``validateResourceQuantity``), limits only with a cohort or parent
    (``validateLimit``), and, for a ClusterQueue, ``lendingLimit`` <= ``nominalQuota``
    (``validateLendingLimit``; not for a Cohort)."""
    errors = []
    for i, quota in enumerate(flavor.get("resources") or ()):
        if i >= len(covered):
            break
        base = f"{path}.resources[{i}]"
        if quota.get("name") != covered[i]:
            errors.append(
                _invalid(
                    f"{base}.name",
                    str(quota.get("name")),
                    "must match the name in coveredResources",
                )
            )
        nominal = quota.get("nominalQuota")
        errors += _validate_resource_quantity(nominal, f"{base}.nominalQuota")
        if quota.get("borrowingLimit") is not None:
            at = f"{base}.borrowingLimit"
            errors += _validate_limit(quota["borrowingLimit"], at, has_parent, cohort)
            errors += _validate_resource_quantity(quota["borrowingLimit"], at)
        if quota.get("lendingLimit") is not None:
            at = f"{base}.lendingLimit"
            lending = quota["lendingLimit"]
            errors += _validate_resource_quantity(lending, at)
            errors += _validate_limit(lending, at, has_parent, cohort)
            lend, nom = _quantity(lending), _quantity(nominal if nominal is not None else 0)
            if enforce_lending and lend is not None and nom is not None and lend > nom:
                errors.append(
                    _invalid(
                        at,
                        _q(quantity_string(lending)),
                        "must be less than or equal to the nominalQuota",
                    )
                )
    return errors


def _validate_resource_quantity(value: Any, path: str) -> list[str]:
    """``validateResourceQuantity``: a quantity is not negative."""
    amount = _quantity(value)
    if amount is not None and amount < 0:
        return [_invalid(path, _q(quantity_string(value)), "must be greater than or equal to 0")]
    return []


def _validate_limit(value: Any, path: str, has_parent: bool, cohort: bool) -> list[str]:
    """``validateLimit``: borrowingLimit and lendingLimit must be nil without a cohort (for a
    ClusterQueue) or a parent (for a Cohort)."""
    if has_parent:
        return []
    what = "parent" if cohort else "cohort"
    return [_invalid(path, _q(quantity_string(value)), f"must be nil when {what} is empty")]


def validate_fair_sharing(fair_sharing: Any, path: str) -> list[str]:
    """``common.go`` ``validateFairSharing``: the weight is not negative and, when not 0,
    more than 1n (a smaller one collapses to 0)."""
    if not isinstance(fair_sharing, Mapping) or fair_sharing.get("weight") is None:
        return []
    weight = _quantity(fair_sharing["weight"])
    if weight is None:
        return []
    shown = _q(quantity_string(fair_sharing["weight"]))
    errors = []
    if weight < 0:
        errors.append(_invalid(path, shown, "must be greater than or equal to 0"))
    if 0 < weight <= Decimal("1e-9"):
        errors.append(_invalid(path, shown, "When not 0, weight must be > 10e-9"))
    return errors


# --------------------------------------------------------------------------- Cohort


def validate_cohort(cohort: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> None:
    """``cohort_webhook.go`` ``validateCohort`` (CREATE and UPDATE alike): the fair-sharing
    weight, and the resource groups with ``hasParent = spec.parentName != ""`` and
    ``enforceNominalGreaterThanLending = false`` (a Cohort may lend more than its nominal
    quota). Raises Denied."""
    spec = _spec(cohort)
    errors = validate_fair_sharing(spec.get("fairSharing"), "spec.fairSharing")
    errors += validate_resource_groups(
        spec.get("resourceGroups") or [],
        "spec.resourceGroups",
        has_parent=bool(spec.get("parentName")),
        enforce_lending=False,
        cohort=True,
    )
    _aggregate(errors)


# --------------------------------------------------------------------------- ResourceFlavor


def default_resourceflavor(rf: dict[str, Any]) -> None:
    """``resourceflavor_webhook.go`` ``ResourceFlavorWebhook.Default`` (``mresourceflavor.kb.io``,
    CREATE only): add the ``kueue.x-k8s.io/resource-in-use`` finalizer."""
    _add_finalizer(rf)


def validate_resourceflavor(rf: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> None:
    """``resourceflavor_webhook.go`` ``ValidateResourceFlavor`` (CREATE and UPDATE alike):
    ``ValidateLabels(spec.nodeLabels)``, ``validateNodeTaints``, ``validateTolerations``.
    Raises Denied."""
    spec = _spec(rf)
    errors = validate_labels(spec.get("nodeLabels"), "spec.nodeLabels")
    errors += _validate_node_taints(spec.get("nodeTaints") or [], "spec.nodeTaints")
    errors += validate_tolerations(spec.get("tolerations") or [], "spec.tolerations")
    _aggregate(errors)


def _validate_node_taints(taints: list[Mapping[str, Any]], path: str) -> list[str]:
    """``validateNodeTaints``: keys are label names, values label values, and each
    ``(key, effect)`` pair appears once."""
    errors = []
    seen: set[tuple[str, str]] = set()
    for i, taint in enumerate(taints):
        base = f"{path}[{i}]"
        key, value, effect = (str(taint.get(k) or "") for k in ("key", "value", "effect"))
        errors += _validate_label_name(key, f"{base}.key")
        problems = is_valid_label_value(value)
        if problems:
            errors.append(_invalid(f"{base}.value", _q(value), ";".join(problems)))
        if (key, effect) in seen:
            added = taint.get("timeAdded")
            shown = (
                f"v1.Taint{{Key:{_q(key)}, Value:{_q(value)}, Effect:{_q(effect)}, TimeAdded:"
                + ("(*v1.Time)(nil)" if added is None else _q(str(added)))
                + "}"
            )
            errors.append(
                f"{base}: Duplicate value: {shown}: taints must be unique by key and effect pair"
            )
            continue
        seen.add((key, effect))
    return errors


def validate_tolerations(tolerations: list[Mapping[str, Any]], path: str) -> list[str]:
    """``workload_webhook.go`` ``validateTolerations``: a key, when set, is a label name."""
    errors = []
    for i, toleration in enumerate(tolerations):
        if toleration.get("key"):
            errors += _validate_label_name(str(toleration["key"]), f"{path}[{i}].key")
    return errors


# --------------------------------------------------------------------------- Workload


def _conditions(obj: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    status = (obj or {}).get("status")
    return list((status or {}).get("conditions") or ()) if isinstance(status, Mapping) else []


def _condition_true(obj: Mapping[str, Any] | None, kind: str) -> bool:
    """``apimeta.IsStatusConditionTrue``."""
    return any(c.get("type") == kind and c.get("status") == "True" for c in _conditions(obj))


def has_quota_reservation(wl: Mapping[str, Any] | None) -> bool:
    """``pkg/workload/workload.go`` ``HasQuotaReservation``: the QuotaReserved condition is True."""
    return _condition_true(wl, "QuotaReserved")


def has_active_quota_reservation(wl: Mapping[str, Any]) -> bool:
    """``HasActiveQuotaReservation``: it reserves quota, is not Finished, and is active
    (``IsActive``: ``spec.active`` defaults to true)."""
    active = _spec(wl).get("active")
    return (
        has_quota_reservation(wl)
        and not _condition_true(wl, "Finished")
        and (active is None or bool(active))
    )


def _elastic(wl: Mapping[str, Any]) -> bool:
    """``pkg/workloadslicing`` ``Enabled``: the gate and ``kueue.x-k8s.io/elastic-job: "true"``."""
    annotations = (wl.get("metadata") or {}).get("annotations") or {}
    return FEATURES["ElasticJobsViaWorkloadSlices"] and annotations.get(ELASTIC_JOB) == "true"


def default_workload(wl: dict[str, Any]) -> None:
    """``workload_webhook.go`` ``WorkloadWebhook.Default`` (``mworkload.kb.io``, CREATE only):
    drops ``minCount`` from every pod set unless ``PartialAdmission`` is enabled (it is, by
    default)."""
    if FEATURES["PartialAdmission"]:
        return
    for pod_set in _spec(wl).get("podSets") or ():
        if isinstance(pod_set, dict):
            pod_set.pop("minCount", None)


def validate_workload(wl: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> None:
    """``workload_webhook.go`` ``ValidateWorkload`` (CREATE) and ``ValidateWorkloadUpdate``
    (UPDATE). Raises Denied.

    Checked: each pod set (``validatePodSet``: template labels and annotations, the reserved
    ``pods`` resource and negative quantities in containers', init containers' and pod-level
    resources, ``validateTASSliceSize``), at most one pod set with ``minCount`` and none in an
    elastic Workload, ``validateAdmission`` (a Workload that reserves quota has an admission
    whose assignments name its pod sets), ``validateReclaimablePods``, the
    ``kueue.x-k8s.io/admission-gated-by`` annotation (``AdmissionGatedBy``), and, on update,
    immutable pod sets while quota is reserved (``validateImmutablePodSets``; an elastic
    Workload may lower a count). Not checked: ``ValidateConditions``, admission checks'
    ``podSetUpdates``, resource-usage multiples, and the status updates
    (``validateAdmissionUpdate``, ``validateReclaimablePodsUpdate``,
    ``validateClusterNameUpdate``): the fake serves no status subresource, so a write never
    changes a Workload's status.
    """
    errors = _validate_workload(wl, old)
    if old is not None:
        if has_quota_reservation(old):
            errors += _validate_immutable_pod_sets(
                _spec(wl).get("podSets") or [], _spec(old).get("podSets") or [], "spec.podSets"
            )
        if FEATURES["AdmissionGatedBy"]:
            errors += _validate_admission_gated_by_update(old, wl)
    _aggregate(errors)


def _validate_workload(wl: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[str]:
    """``ValidateWorkload``."""
    errors: list[str] = []
    pod_sets = _spec(wl).get("podSets") or []
    variable = 0
    for i, pod_set in enumerate(pod_sets):
        errors += _validate_pod_set(pod_set, f"spec.podSets[{i}]")
        if pod_set.get("minCount") is not None:
            variable += 1
    if variable > 1:
        errors.append(
            _invalid("spec.podSets", str(variable), "at most one podSet can use minCount")
        )
    if variable > 0 and _elastic(wl):
        errors.append(
            _invalid(
                "spec.podSets",
                str(variable),
                "partial admission and elastic job cannot be used together",
            )
        )
    if has_quota_reservation(wl):
        errors += _validate_admission(wl, old, "status.admission")
    errors += _validate_reclaimable_pods(wl, old, "status.reclaimablePods")
    if FEATURES["AdmissionGatedBy"]:
        annotations = (wl.get("metadata") or {}).get("annotations") or {}
        errors += _admission_gated_by_format(str(annotations.get(ADMISSION_GATED_BY) or ""))
    return errors


def _validate_pod_set(pod_set: Mapping[str, Any], path: str) -> list[str]:
    """``validatePodSet``."""
    errors: list[str] = []
    template = pod_set.get("template") or {}
    meta = template.get("metadata") or {}
    if FEATURES["WorkloadValidationForPodSetMetadata"]:
        errors += validate_labels(meta.get("labels"), f"{path}.template.metadata.labels")
        errors += validate_annotations(
            meta.get("annotations"), f"{path}.template.metadata.annotations"
        )
    pod = template.get("spec") or {}
    for section in ("initContainers", "containers"):
        for i, container in enumerate(pod.get(section) or ()):
            base = f"{path}.template.spec.{section}[{i}].resources"
            resources = container.get("resources") or {}
            errors += _validate_resource_list(resources.get("requests"), f"{base}.requests")
            errors += _validate_resource_list(resources.get("limits"), f"{base}.limits")
    if pod.get("resources") is not None:
        base = f"{path}.template.spec.resources"
        errors += _validate_resource_list(pod["resources"].get("requests"), f"{base}.requests")
        errors += _validate_resource_list(pod["resources"].get("limits"), f"{base}.limits")
    if FEATURES["TASValidateWorkloadSliceSize"]:
        errors += _validate_tas_slice_size(
            pod_set.get("topologyRequest"), f"{path}.topologyRequest"
        )
    return errors


def _validate_resource_list(resources: Any, path: str) -> list[str]:
    """``validateResourceList``: ``pods`` is reserved; quantities are not negative
    (``WorkloadValidateResourcesAreNonNegative``). Keys sorted (a Go map's order is random)."""
    errors = []
    for name, quantity in sorted((resources or {}).items()):
        if name == "pods":
            errors.append(
                _invalid(f"{path}[pods]", "pods", "the key is reserved for internal kueue use")
            )
        if FEATURES["WorkloadValidateResourcesAreNonNegative"]:
            errors += _validate_resource_quantity(quantity, f"{path}[{name}]")
    return errors


def _validate_tas_slice_size(request: Any, path: str) -> list[str]:
    """``validateTASSliceSize``."""
    if not isinstance(request, Mapping):
        return []
    errors = []
    size = request.get("podSetSliceSize")
    if request.get("podSetSliceRequiredTopology") is not None:
        if size is None:
            errors.append(
                f"{path}.podSetSliceSize: Required value: must be set when "
                "podSetSliceRequiredTopology is specified"
            )
        elif size <= 0:
            errors.append(_invalid(f"{path}.podSetSliceSize", str(size), "must be greater than 0"))
    elif size is not None:
        errors.append(
            f"{path}.podSetSliceSize: Forbidden: may not be set when podSetSliceRequiredTopology "
            "is not specified"
        )
    for i, constraint in enumerate(request.get("podsetSliceRequiredTopologyConstraints") or ()):
        if (constraint.get("size") or 0) <= 0:
            errors.append(
                _invalid(
                    f"{path}.podsetSliceRequiredTopologyConstraints[{i}].size",
                    str(constraint.get("size") or 0),
                    "must be greater than 0",
                )
            )
    return errors


def _validate_admission(
    wl: Mapping[str, Any], old: Mapping[str, Any] | None, path: str
) -> list[str]:
    """``validateAdmission``: a Workload with QuotaReserved has ``status.admission`` (unless it
    already lacked one, ``reservesQuotaWithoutAdmission``), whose pod set assignments name pod
    sets of the Workload."""
    admission = (wl.get("status") or {}).get("admission")
    if admission is None:
        if (
            old is not None
            and has_quota_reservation(old)
            and not (old.get("status") or {}).get("admission")
        ):
            return []
        return [f"{path}: Required value: must be set while the QuotaReserved condition is true"]
    names = {p.get("name", "main") for p in _spec(wl).get("podSets") or ()}
    errors = []
    for i, assignment in enumerate(admission.get("podSetAssignments") or ()):
        if assignment.get("name") not in names:
            errors.append(
                f"{path}.podSetAssignments[{i}].name: Not found: {_q(str(assignment.get('name')))}"
            )
    return errors


def _validate_reclaimable_pods(
    wl: Mapping[str, Any], old: Mapping[str, Any] | None, path: str
) -> list[str]:
    """``validateReclaimablePods``: each count names a pod set and is at most its count (an
    elastic Workload keeps an unchanged count that is over it)."""
    reclaimable = (wl.get("status") or {}).get("reclaimablePods") or []
    if not reclaimable:
        return []
    pod_sets = {p.get("name", "main"): p for p in _spec(wl).get("podSets") or ()}
    known = ", ".join(_q(n) for n in pod_sets)
    old_counts = ((old or {}).get("status") or {}).get("reclaimablePods") or []
    errors = []
    for item in reclaimable:
        name, count = item.get("name"), item.get("count", 0)
        base = f"{path}[{name}]"
        if name not in pod_sets:
            errors.append(
                f"{base}.name: Unsupported value: {_q(str(name))}"
                + (f": supported values: {known}" if known else "")
            )
        elif count > pod_sets[name].get("count", 1) and not (
            old is not None and _elastic(wl) and item in old_counts
        ):
            errors.append(
                _invalid(
                    f"{base}.count",
                    str(count),
                    f"should be less or equal to {pod_sets[name].get('count', 1)}",
                )
            )
    return errors


def _validate_immutable_pod_sets(new: list[Any], old: list[Any], path: str) -> list[str]:
    """``validateImmutablePodSets``: while quota is reserved the pod sets may not change but
    for a lower count with ``ElasticJobsViaWorkloadSlices`` (``validateImmutablePodSet``)."""
    if len(new) != len(old):
        return [_invalid(path, json.dumps(new, separators=(",", ":")), "field is immutable")]
    errors = []
    for i, (new_set, old_set) in enumerate(zip(new, old, strict=True)):
        compared = dict(new_set)
        if FEATURES["ElasticJobsViaWorkloadSlices"] and compared.get("count", 1) < old_set.get(
            "count", 1
        ):
            compared["count"] = old_set.get("count", 1)
        if compared != old_set:
            # ValidateImmutableField(new, old, path.Child(strconv.Itoa(i))): ".0", not "[0]"
            errors.append(
                _invalid(
                    f"{path}.{i}", json.dumps(new_set, separators=(",", ":")), "field is immutable"
                )
            )
    return errors


def _admission_gated_by_format(value: str) -> list[str]:
    """``pkg/util/webhook/validation_admissiongatedby.go``
    ``validateAdmissionGatedByAnnotationFormat``: comma-separated, unique, non-empty,
    domain-prefixed gate names of at most 63 characters."""
    if not value:
        return []
    path = f"metadata.annotations[{ADMISSION_GATED_BY}]"
    errors = []
    seen: set[str] = set()
    gates = [g.strip() for g in value.split(",")] if value.strip() else []
    for gate in gates:
        if not gate:
            errors.append(_invalid(path, _q(value), "cannot contain empty gate names"))
            continue
        if gate in seen:
            errors.append(_invalid(path, _q(value), f"duplicate gate name: {gate}"))
            continue
        seen.add(gate)
        errors += _domain_prefixed_path(path, gate)
        if len(gate) > 63:
            errors.append(f"{path}: Too long: may not be more than 63 bytes")
    return errors


def _domain_prefixed_path(path: str, value: str) -> list[str]:
    """``k8s.io/apimachinery/pkg/util/validation`` ``IsDomainPrefixedPath``."""
    host, slash, rest = value.partition("/")
    if not slash or not host or not rest:
        return [_invalid(path, _q(value), 'must be a domain-prefixed path (such as "acme.io/foo")')]
    errors = [_invalid(path, _q(host), m) for m in is_dns1123_subdomain(host)]
    if not _HTTP_PATH.match(rest):
        errors.append(_invalid(path, _q(rest), _regex_error("Invalid path", _HTTP_PATH_FMT)))
    return errors


def _validate_admission_gated_by_update(
    old: Mapping[str, Any], new: Mapping[str, Any]
) -> list[str]:
    """``ValidateAdmissionGatedByAnnotationOnUpdate``: a gate cannot be added after creation;
    gates can only be removed."""
    path = f"metadata.annotations[{ADMISSION_GATED_BY}]"
    old_value = str(
        ((old.get("metadata") or {}).get("annotations") or {}).get(ADMISSION_GATED_BY) or ""
    )
    new_value = str(
        ((new.get("metadata") or {}).get("annotations") or {}).get(ADMISSION_GATED_BY) or ""
    )
    errors = []
    if not old_value and new_value:
        errors.append(f"{path}: Forbidden: cannot add admission gate after creation")
    if old_value and new_value:
        old_gates = [g.strip() for g in old_value.split(",")]
        if any(g.strip() not in old_gates for g in new_value.split(",")):
            errors.append(f"{path}: Forbidden: can only remove gates, not add new ones")
    return errors


# --------------------------------------------------------------------------- controllers


def clusterqueue_releasable(name: str, workloads: Iterable[Mapping[str, Any]]) -> bool:
    """``clusterqueue_controller.go`` ``Reconcile`` for a ClusterQueue being deleted: its
    finalizer goes when ``cache.ClusterQueueEmpty`` — no Workload with an active quota
    reservation (``HasActiveQuotaReservation``) is admitted to it
    (``status.admission.clusterQueue``; ``Cache.addOrUpdateWorkloadWithoutLock``)."""
    for wl in workloads:
        admission = (wl.get("status") or {}).get("admission") or {}
        if admission.get("clusterQueue") == name and has_active_quota_reservation(wl):
            return False
    return True


def resourceflavor_users(name: str, clusterqueues: Iterable[Mapping[str, Any]]) -> list[str]:
    """``resourceflavor_controller.go`` ``Reconcile``: the ClusterQueues that still use the
    flavor (``cache.ClusterQueuesUsingFlavor``); its finalizer goes when there are none."""
    return sorted(
        str(cq["metadata"]["name"])
        for cq in clusterqueues
        if name in _all_flavors(_spec(cq).get("resourceGroups") or [])
    )


def finalizer_patch(obj: Mapping[str, Any], *, add: bool) -> list[dict[str, Any]] | None:
    """The JSON patch a reconciler's ``client.Update`` amounts to when it adds
    (``controllerutil.AddFinalizer``) or removes (``RemoveFinalizer``) the finalizer, or None
    when there is nothing to change."""
    finalizers = list((obj.get("metadata") or {}).get("finalizers") or [])
    if add == (FINALIZER in finalizers):
        return None
    rv = obj["metadata"]["resourceVersion"]
    test = {"op": "test", "path": "/metadata/resourceVersion", "value": rv}
    if add:
        return [
            test,
            {"op": "add", "path": "/metadata/finalizers", "value": [*finalizers, FINALIZER]},
        ]
    remaining = [f for f in finalizers if f != FINALIZER]
    return [test, {"op": "replace", "path": "/metadata/finalizers", "value": remaining}]
