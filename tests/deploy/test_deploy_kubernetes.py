"""Kubernetes manifests: schema validation (kubernetes-validate, offline) and the fields that matter.

base/ is the CPU deployment; gpu/ is a kustomize overlay. The overlay is rendered with `kubectl kustomize`
when kubectl is on PATH; the base files are complete resources and are checked without it too.
"""

from __future__ import annotations

import re

import pytest
from deploy_helpers import DOCKERFILE, K8S, load_yaml, load_yaml_all, run, settings_fields, tool

BASE_FILES = sorted(p for p in (K8S / "base").glob("*.yaml") if p.name != "kustomization.yaml")


def validator():
    return pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed (dev extra)")


def kubectl() -> str:
    path = tool("kubectl")
    if path is None:
        pytest.skip("kubectl (with its built-in kustomize) is not installed")
    return path


def render(overlay: str) -> list[dict]:
    result = run([kubectl(), "kustomize", str(K8S / overlay)], timeout=60)
    assert result.returncode == 0, result.stderr
    return load_yaml_all(result.stdout)


def base_resources() -> list[dict]:
    return [doc for path in BASE_FILES for doc in load_yaml_all(path.read_text())]


def by_kind(resources: list[dict]) -> dict[str, dict]:
    return {doc["kind"]: doc for doc in resources}


@pytest.mark.parametrize("path", BASE_FILES, ids=lambda p: p.name)
def test_base_manifest_validates_against_kubernetes_schema(path):
    kv = validator()
    for doc in load_yaml_all(path.read_text()):
        kv.validate(doc, kv.latest_version(), strict=True)


@pytest.mark.parametrize("overlay", ["base", "gpu"])
def test_rendered_kustomization_validates(overlay):
    kv = validator()
    resources = render(overlay)
    assert {doc["kind"] for doc in resources} == {
        "ConfigMap",
        "Deployment",
        "Service",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
    }
    for doc in resources:
        kv.validate(doc, kv.latest_version(), strict=True)


def test_schema_validation_catches_a_misspelt_field():
    kv = validator()
    deployment = by_kind(base_resources())["Deployment"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["readinesProbe"] = container.pop("readinessProbe")
    with pytest.raises(kv.ValidationError):
        kv.validate(deployment, kv.latest_version(), strict=True)


def _container(deployment: dict) -> dict:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def _check_deployment(resources: list[dict]) -> None:
    kinds = by_kind(resources)
    deployment, config = kinds["Deployment"], kinds["ConfigMap"]
    assert deployment["apiVersion"] == "apps/v1"
    pod = deployment["spec"]["template"]
    spec = pod["spec"]
    container = _container(deployment)
    port = int(config["data"]["MT_PORT"])
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["http"] == port
    assert container["envFrom"] == [{"configMapRef": {"name": config["metadata"]["name"]}}]
    assert container["command"] == ["/app/deploy/entrypoint.sh"]
    # probes: readiness on /readyz, liveness on /healthz, both on the service port
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert ports.get(container[probe]["httpGet"]["port"], container[probe]["httpGet"]["port"]) == port
    # graceful shutdown: preStop sleep + drain + margin fits in the grace period
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    drain = float(config["data"]["MT_DRAIN_SECONDS"])
    assert spec["terminationGracePeriodSeconds"] >= float(pre_stop[1]) + drain + 5
    # resources, user, and the scrape annotations
    for key in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(container["resources"][key])
    user = re.search(r"^USER (\d+):(\d+)$", DOCKERFILE.read_text(), re.MULTILINE)
    assert spec["securityContext"]["runAsUser"] == int(user.group(1))
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    annotations = pod["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == port and annotations["prometheus.io/path"] == "/metrics"
    # secrets stay out of the ConfigMap
    assert "MT_API_KEYS" not in config["data"]
    (api_keys,) = [e for e in container["env"] if e["name"] == "MT_API_KEYS"]
    assert api_keys["valueFrom"]["secretKeyRef"]["optional"] is True


def test_base_deployment_fields():
    _check_deployment(base_resources())


def test_service_and_hpa_point_at_the_deployment():
    kinds = by_kind(base_resources())
    deployment, service, hpa = kinds["Deployment"], kinds["Service"], kinds["HorizontalPodAutoscaler"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in service["spec"]["selector"].items())
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }
    assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    assert any(m["type"] == "Resource" and m["resource"]["name"] == "cpu" for m in hpa["spec"]["metrics"])
    container = _container(deployment)
    assert "cpu" in container["resources"]["requests"], "CPU utilisation needs a CPU request"


def test_configmap_names_real_settings():
    config = by_kind(base_resources())["ConfigMap"]
    unknown = sorted(k for k in config["data"] if k[3:].lower() not in settings_fields())
    assert not unknown and all(k.startswith("MT_") for k in config["data"]), unknown
    assert config["data"]["MT_PROVIDERS"] == "cpu"


def test_gpu_overlay_requests_a_gpu_and_cuda():
    resources = render("gpu")
    _check_deployment(resources)
    kinds = by_kind(resources)
    container = _container(kinds["Deployment"])
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["image"].endswith(":gpu")
    assert kinds["ConfigMap"]["data"]["MT_PROVIDERS"] == "cuda"
    assert "nvidia.com/gpu" not in str(by_kind(render("base"))["Deployment"])


def test_servicemonitor_scrapes_the_service_port():
    monitor = load_yaml(K8S / "servicemonitor.yaml")
    service = by_kind(base_resources())["Service"]
    assert monitor["kind"] == "ServiceMonitor" and monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
