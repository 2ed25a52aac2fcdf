"""The tenancy model as plain data: the input of the desired-state renderer (pure).

The Django side (``quotas`` models) builds one :class:`ClusterSpec` per sync; ``render.render()``
turns it into Kubernetes manifests. Nothing here knows about Django or Kubernetes.

Conventions:

* Quantities are ``Decimal`` amounts in base units (cores, bytes, devices), keyed by Kubernetes
  resource name (``cpu``, ``memory``, ``nvidia.com/gpu``, ...), never by quota key
  (``requests.cpu``): the renderer adds the prefixes.
* Each dataclass checks its own invariants in ``__post_init__`` and raises ``ValueError``;
  invariants that span several objects (unknown team, unknown tier, parent that is not a
  department) are checked by ``render()``.
* Collections are normalised to sorted tuples on construction, so two specs describing the same
  model compare equal and render identically whatever order the database returned rows in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Literal

from quotas.domain.names import DEFAULT_PROTECTED_NAMESPACES, tier_name_errors

__all__ = [
    "OVERCOMMITTABLE_RESOURCES",
    "PREEMPTION_POLICIES",
    "ROLES",
    "ClusterSpec",
    "LimitSpec",
    "MemberSpec",
    "NamespaceSpec",
    "PreemptionPolicy",
    "Role",
    "TeamSpec",
    "TierSpec",
]

Role = Literal["lead", "member", "viewer"]
PreemptionPolicy = Literal["PreemptLowerPriority", "Never"]

ROLES: tuple[str, ...] = ("lead", "member", "viewer")
PREEMPTION_POLICIES: tuple[str, ...] = ("PreemptLowerPriority", "Never")

# Kubernetes lets requests and limits differ only for these; every other resource (GPUs, MIG
# slices, RDMA, hugepages) needs request == limit, and a request alone is rejected.
OVERCOMMITTABLE_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})

# PriorityClass values above one billion are reserved for system-critical classes.
_MAX_USER_PRIORITY = 1_000_000_000


def _check_amounts(owner: str, what: str, amounts: dict[str, Decimal]) -> None:
    for resource, amount in amounts.items():
        if resource.startswith(("requests.", "limits.")):
            raise ValueError(f"{owner}: {what} is keyed by resource name, got {resource!r}")
        if not Decimal(amount).is_finite() or amount < 0:
            raise ValueError(f"{owner}: {what}[{resource}] must be >= 0, got {amount!r}")


@dataclass(frozen=True)
class TierSpec:
    """A priority tier, rendered as a PriorityClass named ``name``."""

    name: str
    value: int
    preemption_policy: PreemptionPolicy
    description: str = ""
    global_default: bool = False

    def __post_init__(self) -> None:
        if self.preemption_policy not in PREEMPTION_POLICIES:
            raise ValueError(
                f"tier {self.name}: unknown preemption policy {self.preemption_policy}"
            )
        if problems := tier_name_errors(self.name):
            raise ValueError(f"tier {self.name}: {'; '.join(problems)}")
        if not -(2**31) <= self.value <= _MAX_USER_PRIORITY:
            raise ValueError(f"tier {self.name}: value must be an int32 <= 1000000000")


@dataclass(frozen=True, order=True)
class MemberSpec:
    """A user's role in a team; ``username`` is the Kubernetes user name (OIDC subject)."""

    username: str
    role: Role

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"member {self.username}: unknown role {self.role!r}")


@dataclass(frozen=True)
class LimitSpec:
    """Container defaults and maxima for a namespace (rendered as LimitRange ``fairshare``).

    ``default_limit`` becomes LimitRange ``default``, ``default_request`` ``defaultRequest`` and
    ``max`` ``max`` (e.g. ``{"nvidia.com/gpu": Decimal(8)}``). ``quota_limits`` asks the
    ResourceQuota to also cap ``limits.cpu`` / ``limits.memory`` at the namespace's request
    amounts (pods must then declare limits, which ``default_limit`` supplies); there is never a
    ``limits.`` quota for any other resource.
    """

    default_request: dict[str, Decimal] = field(default_factory=dict)
    default_limit: dict[str, Decimal] = field(default_factory=dict)
    max: dict[str, Decimal] = field(default_factory=dict)
    quota_limits: bool = False

    def __post_init__(self) -> None:
        """Reject what the API server would reject, so a sync fails before it starts.

        1. amounts are non-negative and keyed by resource name;
        2. defaultRequest <= default <= max per resource;
        3. a default request for a non-overcommittable resource (GPUs, ...) needs an equal
           default limit, otherwise pods created with the default would be invalid.
        """
        for what in ("default_request", "default_limit", "max"):
            _check_amounts("limit policy", what, getattr(self, what))
        chains = (
            ("default_request", "default_limit"),
            ("default_limit", "max"),
            ("default_request", "max"),
        )
        for low_name, high_name in chains:
            low, high = getattr(self, low_name), getattr(self, high_name)
            for resource in sorted(low.keys() & high.keys()):
                if low[resource] > high[resource]:
                    raise ValueError(
                        f"limit policy: {low_name}[{resource}] exceeds {high_name}[{resource}]"
                    )
        for resource, amount in sorted(self.default_request.items()):
            if resource in OVERCOMMITTABLE_RESOURCES:
                continue
            if self.default_limit.get(resource) != amount:
                raise ValueError(
                    f"limit policy: {resource} cannot be overcommitted, so default_request "
                    f"needs an equal default_limit"
                )

    @property
    def is_empty(self) -> bool:
        """True when there is nothing to put in a LimitRange."""
        return not (self.default_request or self.default_limit or self.max)


@dataclass(frozen=True)
class NamespaceSpec:
    """A Kubernetes namespace assigned to a team.

    ``quota`` holds the namespace's hard request amounts (its derived split of the team quota);
    an unmanaged namespace (``managed=False``) is counted for usage but never rendered.
    """

    name: str
    team: str
    managed: bool = True
    labels: dict[str, str] = field(default_factory=dict)
    quota: dict[str, Decimal] = field(default_factory=dict)
    limits: LimitSpec | None = None
    volcano_jobs: bool = False
    adopted: bool = False  # existed before Fairshare managed it: never deleted

    def __post_init__(self) -> None:
        _check_amounts(f"namespace {self.name}", "quota", self.quota)


@dataclass(frozen=True)
class TeamSpec:
    """A team (or department) with its fair-share settings, quota and people.

    ``guarantee`` and ``limit`` are the team's TeamQuota rows (Volcano ``guarantee`` and
    ``capability``); ``deserved`` is its DRF fair allocation from the last solve (may be empty,
    the renderer clamps it between guarantee and limit). ``groups`` are ``(group, role)`` pairs
    for identity-provider groups bound alongside the users.
    """

    slug: str
    parent: str | None = None
    weight: int = 1
    tier: str | None = None
    reclaimable: bool = True
    active: bool = True
    guarantee: dict[str, Decimal] = field(default_factory=dict)
    limit: dict[str, Decimal] = field(default_factory=dict)
    deserved: dict[str, Decimal] = field(default_factory=dict)
    members: tuple[MemberSpec, ...] = ()
    groups: tuple[tuple[str, Role], ...] = ()
    is_department: bool = False

    def __post_init__(self) -> None:
        """Check the team's own invariants and sort its people.

        1. weight is within Volcano's range 1..65535;
        2. amounts are non-negative; guarantee <= limit for every resource that has both;
        3. roles are known; members and groups are stored sorted.
        """
        owner = f"team {self.slug}"
        if not 1 <= self.weight <= 65535:
            raise ValueError(f"{owner}: weight must be within 1..65535, got {self.weight}")
        for what in ("guarantee", "limit", "deserved"):
            _check_amounts(owner, what, getattr(self, what))
        for resource in sorted(self.guarantee.keys() & self.limit.keys()):
            if self.guarantee[resource] > self.limit[resource]:
                raise ValueError(f"{owner}: guarantee[{resource}] exceeds limit[{resource}]")
        for group, role in self.groups:
            if role not in ROLES:
                raise ValueError(f"{owner}: group {group}: unknown role {role!r}")
        object.__setattr__(self, "members", tuple(sorted(self.members)))
        object.__setattr__(self, "groups", tuple(sorted(tuple(g) for g in self.groups)))


@dataclass(frozen=True)
class ClusterSpec:
    """Everything ``render()`` needs: all teams, namespaces and tiers (sorted by name)."""

    teams: tuple[TeamSpec, ...] = ()
    namespaces: tuple[NamespaceSpec, ...] = ()
    tiers: tuple[TierSpec, ...] = ()
    # Glob patterns of namespaces nothing is rendered into (the installation's deny-list).
    protected_namespaces: tuple[str, ...] = DEFAULT_PROTECTED_NAMESPACES
    # The cluster's GPU products (node label ``nvidia.com/gpu.product``) with their GPU counts:
    # the Kueue backend renders one ResourceFlavor per product and splits each team's
    # ``nvidia.com/gpu`` amounts across them by these counts (Volcano ignores it).
    gpu_products: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        products = tuple(sorted((str(p), int(n)) for p, n in self.gpu_products))
        if len({p for p, _ in products}) != len(products):
            raise ValueError("duplicate GPU products")
        for product, count in products:
            if not product or count <= 0:
                raise ValueError(f"GPU product {product!r}: needs a name and a positive count")
        object.__setattr__(self, "gpu_products", products)
        object.__setattr__(self, "teams", tuple(sorted(self.teams, key=lambda t: t.slug)))
        object.__setattr__(self, "namespaces", tuple(sorted(self.namespaces, key=lambda n: n.name)))
        object.__setattr__(self, "tiers", tuple(sorted(self.tiers, key=lambda t: t.name)))
