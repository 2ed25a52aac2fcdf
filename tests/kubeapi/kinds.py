"""The kinds the fake API server serves, and how each maps onto REST paths."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    kind: str
    group: str  # "" for the core group
    version: str
    plural: str
    namespaced: bool
    # How metadata.name is validated: "subdomain", "label" or "path" (RBAC's path-segment rule).
    name_rule: str = "subdomain"
    # Top-level fields besides apiVersion/kind/metadata; anything else is an unknown field.
    fields: tuple[str, ...] = ("spec", "status")
    # Kinds with a status subresource ignore status on create/update through the main resource.
    status_subresource: bool = False
    # Custom resources only accept JSON merge patch and apply (no strategic merge).
    custom: bool = False
    short_names: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """Kind.group as the API server prints it in messages (``Queue.scheduling.volcano.sh``)."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    @property
    def resource(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


RBAC = "rbac.authorization.k8s.io"
KUEUE = "kueue.x-k8s.io"

KINDS: tuple[Kind, ...] = (
    Kind("Namespace", "", "v1", "namespaces", False, "label", status_subresource=True),
    Kind("Node", "", "v1", "nodes", False, status_subresource=True),
    Kind("Pod", "", "v1", "pods", True, status_subresource=True),
    Kind("ResourceQuota", "", "v1", "resourcequotas", True, status_subresource=True),
    Kind("ConfigMap", "", "v1", "configmaps", True, fields=("data", "binaryData", "immutable")),
    # core/v1 Event (staging/src/k8s.io/api/core/v1/types.go ``Event``): no spec, its fields sit
    # at the top level; no status subresource.
    Kind(
        "Event",
        "",
        "v1",
        "events",
        True,
        fields=(
            "involvedObject",
            "reason",
            "message",
            "source",
            "firstTimestamp",
            "lastTimestamp",
            "count",
            "type",
            "eventTime",
            "series",
            "action",
            "related",
            "reportingComponent",
            "reportingInstance",
        ),
        short_names=("ev",),
    ),
    Kind("LimitRange", "", "v1", "limitranges", True, fields=("spec",)),
    Kind("Role", RBAC, "v1", "roles", True, "path", fields=("rules",)),
    Kind("RoleBinding", RBAC, "v1", "rolebindings", True, "path", fields=("subjects", "roleRef")),
    Kind("ClusterRole", RBAC, "v1", "clusterroles", False, "path", ("rules", "aggregationRule")),
    Kind(
        "PriorityClass",
        "scheduling.k8s.io",
        "v1",
        "priorityclasses",
        False,
        fields=("value", "globalDefault", "description", "preemptionPolicy"),
    ),
    # Dynamic Resource Allocation, resource.k8s.io/v1 (GA in Kubernetes 1.34): scopes, fields and
    # the ResourceClaim status subresource as kubernetes/kubernetes
    # staging/src/k8s.io/api/resource/v1/types.go declares them (``ResourceClaim`` namespaced,
    # spec + status; ``ResourceSlice`` and ``DeviceClass`` cluster-scoped, spec only). Slices
    # and classes are served without validation (the usage collector only LISTs them); a
    # ResourceClaim is validated as far as ResourceQuota reads it and charged against the
    # namespace's quotas on create (``claimquota.py``).
    Kind("ResourceClaim", "resource.k8s.io", "v1", "resourceclaims", True, status_subresource=True),
    Kind("ResourceSlice", "resource.k8s.io", "v1", "resourceslices", False, fields=("spec",)),
    Kind("DeviceClass", "resource.k8s.io", "v1", "deviceclasses", False, fields=("spec",)),
    Kind(
        "Queue",
        "scheduling.volcano.sh",
        "v1beta1",
        "queues",
        False,
        status_subresource=True,
        custom=True,
        short_names=("q", "queue-v1beta1"),
    ),
    Kind(
        "PodGroup",
        "scheduling.volcano.sh",
        "v1beta1",
        "podgroups",
        True,
        status_subresource=True,
        custom=True,
        short_names=("pg", "podgroup-v1beta1"),
    ),
    Kind(
        "Job",
        "batch.volcano.sh",
        "v1alpha1",
        "jobs",
        True,
        status_subresource=True,
        custom=True,
        short_names=("vcjob", "vj"),
    ),
    # Kueue (kubernetes-sigs/kueue config/components/crd/bases at commit
    # ff69552e79ad21652c36caa97038382e55625cf7): names, scopes, short names and subresources as
    # the CRDs declare them. Only v1beta2 is served: it is the storage version; v1beta1 is
    # deprecated, and the fake serves one version per group.
    Kind(
        "ClusterQueue",
        KUEUE,
        "v1beta2",
        "clusterqueues",
        False,
        status_subresource=True,
        custom=True,
        short_names=("cq",),
    ),
    Kind(
        "Cohort",
        KUEUE,
        "v1beta2",
        "cohorts",
        False,
        status_subresource=True,
        custom=True,
        short_names=("co",),
    ),
    Kind(
        "LocalQueue",
        KUEUE,
        "v1beta2",
        "localqueues",
        True,
        status_subresource=True,
        custom=True,
        short_names=("queue", "queues", "lq"),
    ),
    Kind(
        "ResourceFlavor",
        KUEUE,
        "v1beta2",
        "resourceflavors",
        False,
        fields=("spec",),
        custom=True,
        short_names=("flavor", "flavors", "rf"),
    ),
    # No spec: value and description sit at the top level.
    Kind(
        "WorkloadPriorityClass",
        KUEUE,
        "v1beta2",
        "workloadpriorityclasses",
        False,
        fields=("value", "description"),
        custom=True,
        short_names=("wpc",),
    ),
    Kind(
        "Workload",
        KUEUE,
        "v1beta2",
        "workloads",
        True,
        status_subresource=True,
        custom=True,
        short_names=("kwl", "kueueworkload", "kueueworkloads"),
    ),
)

BY_KIND: dict[str, Kind] = {k.kind: k for k in KINDS}
BY_PATH: dict[tuple[str, str, str], Kind] = {(k.group, k.version, k.plural): k for k in KINDS}
# Short names first, so that a kind's own name, plural or resource wins over another kind's
# short name: LocalQueue's short names "queue" and "queues" are Volcano Queue's kind and plural
# (kubectl resolves them the same way: an exact resource name is not expanded as a short name,
# k8s.io/client-go/restmapper/shortcut.go ``expandResourceShortcut``).
_ALIASES: dict[str, Kind] = {}
for _k in KINDS:
    for _alias in _k.short_names:
        _ALIASES.setdefault(_alias.lower(), _k)
for _k in KINDS:
    for _alias in (_k.kind, _k.plural, _k.resource):
        _ALIASES[_alias.lower()] = _k


def lookup(name: str) -> Kind:
    """Return the Kind for a kind name, plural or ``plural.group`` (case-insensitive).

    Raises KeyError for a kind the fake does not serve.
    """
    try:
        return _ALIASES[name.lower()]
    except KeyError:
        raise KeyError(f"the fake API server does not serve {name!r}") from None
