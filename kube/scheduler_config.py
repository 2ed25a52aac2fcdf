"""Reading and checking the live Volcano scheduler configuration.

Volcano's scheduler reads its configuration from a ConfigMap (``volcano-system/
volcano-scheduler-configmap`` in the Helm chart, key ``volcano-scheduler.conf``): a YAML
document with ``actions`` and ``tiers`` of ``plugins``. Fairshare writes its DRF allocation into
each Queue's ``deserved`` and builds department hierarchies with ``parent``; only the
``capacity`` plugin reads those (``pkg/scheduler/plugins/capacity/capacity.go``, hierarchy with
``enableHierarchy: true``: the YAML key of ``EnabledHierarchy`` in
``pkg/scheduler/conf/scheduler_conf.go``). The default configuration uses ``proportion``
(``pkg/scheduler/plugins/proportion/proportion.go``), which computes its own deserved from
``weight`` and ignores ``deserved`` and ``parent``. ``deploy/volcano/`` ships the configuration
Fairshare expects.

Kueue reads its configuration from ``kueue-system/kueue-manager-config`` (the Helm chart's
``<release>-manager-config`` and the kustomize install's ``kueue-`` prefixed ``manager-config``),
key ``controller_manager_config.yaml``: a ``config.kueue.x-k8s.io/v1beta2`` Configuration
(``apis/config/v1beta2/configuration_types.go``). Its ``fairSharing`` section *is* the switch:
without it the ClusterQueues' and Cohorts' ``fairSharing.weight`` (the teams' weights) have no
effect
(:func:`kueue_config_warnings`; ``deploy/kueue/helm-values.yaml`` ships what Fairshare expects).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml
from kubernetes import client as k8s_client

from .client import request_json
from .errors import K8sNotFound, K8sPermanent

__all__ = [
    "CONFIG_KEY",
    "KUEUE_CONFIG_KEY",
    "kueue_config_warnings",
    "read_scheduler_config",
    "scheduler_config_warnings",
]

CONFIG_KEY = "volcano-scheduler.conf"
KUEUE_CONFIG_KEY = "controller_manager_config.yaml"
# volcano pkg/scheduler/plugins/capacity/capacity.go — DynamicResourceAllocationEnable.
DRA_ENABLE_ARGUMENT = "capacity.DynamicResourceAllocationEnable"


def read_scheduler_config(
    api_client: k8s_client.ApiClient, namespace: str, name: str, key: str = CONFIG_KEY
) -> str | None:
    """The scheduler configuration text, or None when the ConfigMap is absent or unreadable
    (not found, forbidden) or has no ``key`` (Volcano's ``volcano-scheduler.conf`` unless
    told). Other errors propagate."""
    try:
        configmap = request_json(
            api_client, "GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}"
        )
    except K8sNotFound:
        return None
    except K8sPermanent as e:
        if e.status in (401, 403, 404):
            return None
        raise
    text = (configmap.get("data") or {}).get(key)
    return text if isinstance(text, str) else None


def kueue_config_warnings(
    text: str, *, device_classes: Mapping[str, str] | None = None
) -> list[str]:
    """What is wrong with Kueue's Configuration ``text`` for Fairshare (empty: nothing).

    1. unparseable → one warning saying so;
    2. no ``fairSharing`` → fair sharing is off: the teams' weights do nothing and borrowing is
       first come, first served (the silently-off configuration of kueue#11134);
    3. ``resources.quotaCheckStrategy`` other than the default ``BlockUndeclared`` is fine
       (Fairshare covers every resource either way) and not reported;
    4. for each DRA DeviceClass of ``device_classes`` (those some team has quota on, each with
       the resource name the ClusterQueues cover it by:
       ``<class>.deviceclass.resource.k8s.io/devices``), the Configuration must map it to that
       name: ``resources.deviceClassMappings[].{name, deviceClassNames}``
       (kueue apis/config/v1beta2/configuration_types.go — ``DeviceClassMapping``). Unmapped, a
       workload whose ResourceClaimTemplate names the class is inadmissible ("DeviceClass … is
       not mapped in DRA configuration", kueue pkg/dra/claims.go —
       ``GetResourceRequestsForResourceClaimTemplates``); mapped to another name, it asks for a
       resource no ClusterQueue covers (inadmissible under ``BlockUndeclared``). Kueue reads the
       mappings once, at start: a changed mapping needs a restart of its manager.
    """
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as e:
        return [f"it is not valid YAML ({e})"]
    if not isinstance(config, dict):
        return ["it is not a Kueue Configuration (a YAML mapping)"]
    warnings: list[str] = []
    if config.get("fairSharing") is None:
        warnings.append(
            "fair sharing is not enabled (no fairSharing section), so the ClusterQueues' and "
            "Cohorts' fairSharing.weight (the teams' weights) have no effect and borrowing is "
            "first come, first served; see deploy/kueue/helm-values.yaml"
        )
    mapped = _device_class_mappings(config)
    for device_class, wanted in sorted((device_classes or {}).items()):
        name = mapped.get(device_class)
        if name is None:
            warnings.append(
                f"DeviceClass {device_class} has no resources.deviceClassMappings entry, so "
                "Kueue does not admit workloads whose ResourceClaimTemplates name it; map it "
                f"to {wanted} (see deploy/kueue/helm-values.yaml: not for a class with an "
                "extendedResourceName, whose pod requests Kueue would then charge under that "
                "name) and restart Kueue"
            )
        elif name != wanted:
            warnings.append(
                f"DeviceClass {device_class} is mapped to {name}, which no ClusterQueue covers "
                f"(Fairshare's quota for it is {wanted}), so Kueue does not admit workloads "
                f"that claim it; map it to {wanted} and restart Kueue"
            )
    return warnings


def _device_class_mappings(config: Mapping[str, Any]) -> dict[str, str]:
    """``{device class: mapped resource name}`` of a Kueue Configuration (first mapping wins,
    as a class may appear in one mapping only: kueue pkg/config/validation.go —
    ``validateDeviceClassMappings``)."""
    resources = config.get("resources")
    mappings = resources.get("deviceClassMappings") if isinstance(resources, dict) else None
    out: dict[str, str] = {}
    for mapping in mappings if isinstance(mappings, list) else ():
        if not isinstance(mapping, dict):
            continue
        for device_class in mapping.get("deviceClassNames") or ():
            out.setdefault(str(device_class), str(mapping.get("name")))
    return out


def _plugins(config: Any) -> list[dict[str, Any]]:
    plugins: list[dict[str, Any]] = []
    for tier in (config or {}).get("tiers") or ():
        for plugin in (tier or {}).get("plugins") or ():
            if isinstance(plugin, dict):
                plugins.append(plugin)
    return plugins


def scheduler_config_warnings(
    text: str, *, hierarchy: bool = False, device_classes: bool = False
) -> list[str]:
    """What is wrong with ``text`` for Fairshare (empty: nothing).

    1. unparseable → one warning saying so;
    2. no ``capacity`` plugin → the Queues' ``deserved`` (the DRF allocation) and ``parent``
       (departments) have no effect;
    3. ``proportion`` enabled as well → the two plugins both compute deserved shares (Volcano
       documents them as alternatives);
    4. departments (``hierarchy``) but ``capacity`` without ``enableHierarchy: true`` → the
       department Queues are ignored (``enabledHierarchy``, the Go field's name, is not the
       YAML key and is ignored by Volcano: said so);
    5. Queues with DRA device-class counts (``device_classes``, ``deviceclass/<class>`` keys) but
       the capacity plugin's argument ``capacity.DynamicResourceAllocationEnable: false`` → the
       counts are not enforced (its default is Kubernetes' DynamicResourceAllocation gate, on
       since 1.34: volcano pkg/scheduler/plugins/capacity/capacity.go — ``New``).
    """
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as e:
        return [f"it is not valid YAML ({e})"]
    if not isinstance(config, dict):
        return ["it is not a YAML mapping with actions and tiers"]
    plugins = {str(p.get("name")): p for p in _plugins(config)}
    warnings: list[str] = []
    capacity = plugins.get("capacity")
    if capacity is None:
        names = ", ".join(sorted(plugins)) or "none"
        warnings.append(
            "the capacity plugin is not enabled (plugins: "
            f"{names}), so the Queues' deserved amounts (Fairshare's DRF allocation) and "
            "their parents (departments) have no effect; see deploy/volcano/"
        )
    if "proportion" in plugins and capacity is not None:
        warnings.append(
            "both the proportion and the capacity plugin are enabled; use capacity only"
        )
    if hierarchy and capacity is not None and capacity.get("enableHierarchy") is not True:
        hint = (
            " (the key is enableHierarchy; Volcano ignores enabledHierarchy)"
            if "enabledHierarchy" in capacity
            else ""
        )
        warnings.append(
            "the capacity plugin runs without enableHierarchy: true, so department Queues "
            f"(spec.parent) are ignored{hint}"
        )
    arguments = (capacity or {}).get("arguments") or {}
    if device_classes and capacity is not None and isinstance(arguments, dict):
        value = arguments.get(DRA_ENABLE_ARGUMENT)
        # framework/arguments.go GetBool: a bool, or a string strconv.ParseBool reads.
        if value is False or value in ("0", "f", "F", "false", "FALSE", "False"):
            warnings.append(
                f"the capacity plugin runs with {DRA_ENABLE_ARGUMENT}: false, so the Queues' "
                "deviceclass/<class> device counts (the teams' DRA quota) are not enforced by "
                "Volcano; the namespaces' ResourceQuota still caps the claims"
            )
    return warnings
