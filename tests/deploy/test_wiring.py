"""deploy/ as a graph: the rendered objects fit together the way the cluster will join them.

Each object alone is schema-valid (tests/scheduling/test_deploy.py); these tests check what
joins them: Service selectors and ports (kube-controller-manager's endpoint slice controller:
a Service selects the pods whose labels include its selector, and a named targetPort resolves
to a container port of that name), ServiceMonitor selectors (Prometheus Operator: a
ServiceMonitor selects *Services* by their labels, then scrapes each endpoint at
``<pod IP>:<port>``), in-cluster URLs (``<service>.<namespace>.svc``), probes (the kubelet's
Host header is the pod IP: Kubernetes ``pkg/probe/http/request.go``), the keys the containers
read, migrations on upgrade and the Volcano configuration's owner.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest
import yaml
from django.http.request import split_domain_port, validate_host
from django.urls import Resolver404, resolve

from kube.scheduler_config import CONFIG_KEY, scheduler_config_warnings

from .manifests import (
    DEPLOY,
    config_map,
    containers,
    everything,
    kustomize,
    kustomize_with_image_tag,
    pod_template,
)

POD_IP = "10.244.3.17"
SVC_URL = re.compile(r"https?://[a-z0-9.-]+\.svc(?:\.cluster\.local)?(?::\d+)?/[^\s\"']*")


@pytest.fixture(scope="module")
def docs() -> list[dict]:
    return everything()


def allowed_hosts(docs: list[dict]) -> list[str]:
    return config_map(docs)["data"]["ALLOWED_HOSTS"].split(",")


def selected_pods(docs: list[dict], namespace: str, selector: dict) -> list[tuple[dict, dict]]:
    """(workload, pod template) pairs whose pod labels include ``selector``."""
    found = []
    for doc in docs:
        template = pod_template(doc)
        if template is None or doc["metadata"].get("namespace") != namespace:
            continue
        labels = template["metadata"].get("labels") or {}
        if selector and selector.items() <= labels.items():
            found.append((doc, template))
    return found


def container_port(template: dict, port: str | int) -> int | None:
    """The container port a Service targetPort or a probe port names (None if none)."""
    for container in template["spec"]["containers"]:
        for declared in container.get("ports") or []:
            if port in (declared.get("name"), declared["containerPort"]):
                return declared["containerPort"]
    return None


def services(docs: list[dict]) -> list[dict]:
    return [d for d in docs if d["kind"] == "Service"]


def resolves(path: str) -> bool:
    try:
        resolve(path)
    except Resolver404:
        return False
    return True


# --------------------------------------------------------------------------- Services


def test_every_service_selects_a_workloads_pods_and_targets_a_port_they_declare(docs):
    assert services(docs)
    for service in services(docs):
        name, namespace = service["metadata"]["name"], service["metadata"]["namespace"]
        pods = selected_pods(docs, namespace, service["spec"].get("selector") or {})
        assert pods, f"Service {name} selects no pods"
        for port in service["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            for workload, template in pods:
                assert container_port(template, target), (
                    f"Service {name} port {port['name']} targets {target!r}, which "
                    f"{workload['metadata']['name']}'s pods do not declare"
                )


# --------------------------------------------------------------------------- ServiceMonitor


def service_monitor_targets(docs: list[dict]) -> list[tuple[dict, dict, dict, int]]:
    """(ServiceMonitor endpoint, Service, pod template, container port) of every scrape."""
    targets = []
    for monitor in [d for d in docs if d["kind"] == "ServiceMonitor"]:
        selector = monitor["spec"]["selector"]["matchLabels"]
        namespaces = monitor["spec"].get("namespaceSelector", {}).get("matchNames") or [
            monitor["metadata"]["namespace"]
        ]
        matched = [
            s
            for s in services(docs)
            if s["metadata"]["namespace"] in namespaces
            and selector.items() <= (s["metadata"].get("labels") or {}).items()
        ]
        assert matched, f"ServiceMonitor {monitor['metadata']['name']} selects no Service"
        for endpoint in monitor["spec"]["endpoints"]:
            for service in matched:
                [port] = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
                pods = selected_pods(
                    docs, service["metadata"]["namespace"], service["spec"]["selector"]
                )
                for _, template in pods:
                    number = container_port(template, port.get("targetPort", port["port"]))
                    targets.append((endpoint, service, template, number))
    return targets


def test_every_service_monitor_selects_a_service_and_a_named_port(docs):
    targets = service_monitor_targets(docs)
    assert targets
    for endpoint, _, _, number in targets:
        assert number, endpoint
        assert resolves(endpoint["path"]), endpoint["path"]


@pytest.mark.django_db
def test_metrics_answer_a_scrape_as_prometheus_makes_it_and_refuse_outsiders(
    docs, client, settings
):
    """Prometheus scrapes ``<pod IP>:<port>`` with the ServiceMonitor's bearer token: 200.
    Without the token, or with a forged Host that is not an IP, it gets nothing."""
    settings.ALLOWED_HOSTS = allowed_hosts(docs)
    settings.FAIRSHARE_METRICS_TOKEN = "scrape-token"
    for endpoint, _, _, number in service_monitor_targets(docs):
        credentials = endpoint["authorization"]["credentials"]
        assert credentials["name"] == "fairshare"  # the Secret the web pods read it from
        assert credentials["key"] == "FAIRSHARE_METRICS_TOKEN"
        host = f"{POD_IP}:{number}"
        scrape = client.get(
            endpoint["path"], HTTP_HOST=host, HTTP_AUTHORIZATION="Bearer scrape-token"
        )
        assert scrape.status_code == 200, scrape.content[:200]
        assert b"fairshare_" in scrape.content
        assert client.get(endpoint["path"], HTTP_HOST=host).status_code == 401
        assert (
            client.get(
                endpoint["path"], HTTP_HOST="evil.example", HTTP_AUTHORIZATION="Bearer scrape-token"
            ).status_code
            == 400
        )


@pytest.mark.django_db
def test_the_pod_ip_exemption_covers_only_the_probes_and_metrics(docs, client, settings):
    settings.ALLOWED_HOSTS = allowed_hosts(docs)
    assert client.get("/healthz", HTTP_HOST=f"{POD_IP}:8000").status_code == 200
    # The site itself, the API and the admin still insist on an allowed host name.
    for path in ("/", "/login/", "/api/v1/", "/admin/login/"):
        assert client.get(path, HTTP_HOST=f"{POD_IP}:8000").status_code == 400, path
    assert client.post("/healthz", HTTP_HOST=f"{POD_IP}:8000").status_code == 400
    assert client.get("/healthz", HTTP_HOST="10.0.0.1.evil.example").status_code == 400


# --------------------------------------------------------------------------- in-cluster URLs


def in_cluster_urls(docs: list[dict]) -> list[tuple[str, str]]:
    """(workload name, URL) of every ``*.svc`` URL a container's environment or args hold."""
    found = []
    for doc in docs:
        for container in containers(doc):
            texts = [e.get("value") or "" for e in container.get("env") or []]
            texts += [*container.get("args", []), *container.get("command", [])]
            for text in texts:
                found += [(doc["metadata"]["name"], url) for url in SVC_URL.findall(text)]
    return found


def test_every_in_cluster_url_reaches_a_service_port_and_a_host_django_allows(docs):
    urls = in_cluster_urls(docs)
    # The GPU node agent's ingest URL at least.
    assert any(name == "fairshare-gpu-agent" for name, _ in urls), urls
    for name, url in urls:
        parts = urlsplit(url)
        service_name, namespace = parts.hostname.split(".")[:2]
        matches = [
            s
            for s in services(docs)
            if (s["metadata"]["name"], s["metadata"]["namespace"]) == (service_name, namespace)
        ]
        assert matches, f"{name}: {url}: no Service {namespace}/{service_name}"
        port = parts.port or (443 if parts.scheme == "https" else 80)
        assert port in [p["port"] for p in matches[0]["spec"]["ports"]], f"{name}: {url}: port"
        domain, _ = split_domain_port(parts.netloc)
        assert validate_host(domain, allowed_hosts(docs)), f"{name}: {url}: not in ALLOWED_HOSTS"
        assert resolves(parts.path), f"{name}: {url}: no such path"


# --------------------------------------------------------------------------- probes


def http_probes(docs: list[dict]):
    for doc in docs:
        template = pod_template(doc)
        for container in containers(doc, init=False):
            for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
                probe = (container.get(kind) or {}).get("httpGet")
                if probe:
                    yield doc["metadata"]["name"], kind, probe, template


@pytest.mark.django_db
def test_every_probe_answers_as_the_kubelet_calls_it(docs, client, settings):
    settings.ALLOWED_HOSTS = allowed_hosts(docs)
    probes = list(http_probes(docs))
    assert {(name, kind) for name, kind, _, _ in probes} >= {
        ("fairshare-web", "readinessProbe"),
        ("fairshare-web", "livenessProbe"),
    }
    for name, kind, probe, template in probes:
        number = container_port(template, probe["port"])
        assert number, f"{name} {kind}: port {probe['port']!r} is not declared"
        headers = {h["name"]: h["value"] for h in probe.get("httpHeaders") or []}
        host = headers.pop("Host", probe.get("host") or f"{POD_IP}:{number}")
        extra = {"HTTP_" + k.upper().replace("-", "_"): v for k, v in headers.items()}
        answer = client.get(probe["path"], HTTP_HOST=host, **extra)
        assert answer.status_code == 200, f"{name} {kind} {probe['path']}: {answer.status_code}"


# --------------------------------------------------------------------------- keys


def documented_keys() -> set[str]:
    """The keys deploy/README.md's "Configuration keys" table documents."""
    text = (DEPLOY / "README.md").read_text()
    section = text.split("## Configuration keys", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([A-Z0-9_]+)` \|", section, flags=re.M))


def test_every_config_map_and_secret_key_a_container_reads_is_documented(docs):
    documented = documented_keys()
    read = set(config_map(docs)["data"])
    for doc in docs:
        for container in containers(doc):
            for env in container.get("env") or []:
                ref = env.get("valueFrom") or {}
                for key in ("secretKeyRef", "configMapKeyRef"):
                    if key in ref:
                        read.add(ref[key]["key"])
    for monitor in [d for d in docs if d["kind"] == "ServiceMonitor"]:
        for endpoint in monitor["spec"]["endpoints"]:
            read.add(endpoint["authorization"]["credentials"]["key"])
    assert read - documented == set()
    # and every documented key is one the code or a manifest reads
    source = "".join(
        path.read_text()
        for package in ("config", "kube", "scheduling", "monitoring", "quotas", "portal")
        for path in (DEPLOY.parent / package).rglob("*.py")
    )
    for key in documented:
        assert key in source or key in read, f"{key} is documented but read nowhere"


# --------------------------------------------------------------------------- upgrades


def test_a_new_image_applies_without_deleting_anything():
    """A Job's pod template is immutable: an apply that changes it fails while the Job exists.
    So no Job may change between two releases; migrations run in the web pods' init container."""
    old = {(d["kind"], d["metadata"]["name"]): d for d in kustomize_with_image_tag("1.0.0")}
    new = {(d["kind"], d["metadata"]["name"]): d for d in kustomize_with_image_tag("1.1.0")}
    for key, doc in new.items():
        if key[0] == "Job" and key in old:
            assert doc["spec"]["template"] == old[key]["spec"]["template"], (
                f"Job {key[1]} keeps its name but changes its pod template"
            )
    web = new[("Deployment", "fairshare-web")]["spec"]["template"]["spec"]
    [migrate] = [c for c in web.get("initContainers", []) if c["name"] == "migrate"]
    assert migrate["command"] == ["python", "-m", "config.migrate"]
    assert migrate["image"] == web["containers"][0]["image"] == "ghcr.io/example/fairshare:1.1.0"
    assert migrate["envFrom"] == web["containers"][0]["envFrom"]


# --------------------------------------------------------------------------- Volcano


def test_nothing_patches_the_configmap_volcanos_helm_release_owns():
    """Helm owns volcano-scheduler-configmap in a chart install: the default deploy/volcano/
    must not carry it (the next `helm upgrade` would silently revert it)."""
    docs = kustomize(DEPLOY / "volcano")
    assert not [d for d in docs if d["kind"] == "ConfigMap"]
    [non_helm] = kustomize(DEPLOY / "volcano" / "non-helm")
    assert non_helm["metadata"]["name"] == "volcano-scheduler-configmap"


def test_the_helm_values_and_the_non_helm_configmap_are_the_same_configuration():
    values = yaml.safe_load((DEPLOY / "volcano" / "helm-values.yaml").read_text())
    configmap = yaml.safe_load(
        (DEPLOY / "volcano" / "non-helm" / "volcano-scheduler-configmap.yaml").read_text()
    )
    text = values["custom"]["scheduler_config_override"]
    assert text == configmap["data"][CONFIG_KEY]
    assert scheduler_config_warnings(text, hierarchy=True) == []


def test_the_network_policies_let_in_what_the_services_target(docs):
    """Only the web pods take traffic, on the port their Service targets."""
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    assert any(p["spec"]["podSelector"] == {} and not p["spec"].get("ingress") for p in policies)
    for service in services(docs):
        selector = service["spec"]["selector"]
        for port in service["spec"]["ports"]:
            allowed = [
                rule_port["port"]
                for policy in policies
                if policy["spec"]["podSelector"]
                and policy["spec"]["podSelector"]["matchLabels"].items() <= selector.items()
                for rule in policy["spec"].get("ingress") or []
                for rule_port in rule.get("ports") or []
            ]
            assert port["targetPort"] in allowed, service["metadata"]["name"]
