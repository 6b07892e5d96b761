"""The scaled-out Kubernetes deployment: overlays scaled/ (Redis, shared files, HPA on mt_queue_depth through
prometheus-adapter) and scaled-keda/ (the same with a KEDA ScaledObject), and prometheus-adapter's rules.

Every rendered resource is validated offline: Kubernetes types with kubernetes-validate (strict), the ScaledObject
and the adapter's rules with the schemas in tests/deploy/schemas/ (README there says where they come from). The
PromQL the adapter and KEDA send is checked by promtool."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlparse

import pytest
from deploy_helpers import K8S, load_yaml, run, settings_fields, tool
from test_deploy_kubernetes import _check_deployment, _container, by_kind, render, validator

SCHEMAS = Path(__file__).parent / "schemas"
ADAPTER_VALUES = K8S / "prometheus-adapter" / "values.yaml"
SCALED_KINDS = {
    "ConfigMap",
    "Deployment",
    "Service",
    "PodDisruptionBudget",
    "StatefulSet",
    "PersistentVolumeClaim",
}


def schema_validator(name: str):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((SCHEMAS / name).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def validate(doc: dict) -> None:
    """A rendered resource against its schema: KEDA's for a ScaledObject, Kubernetes' (strict) for the rest."""
    if doc["apiVersion"].startswith("keda.sh/"):
        errors = list(schema_validator("keda-scaledobject-v1alpha1.json").iter_errors(doc))
        assert not errors, [f"{list(e.absolute_path)}: {e.message}" for e in errors]
        return
    kv = validator()
    kv.validate(doc, kv.latest_version(), strict=True)


def adapter_rules() -> list[dict]:
    return load_yaml(ADAPTER_VALUES)["rules"]["custom"]


@pytest.mark.parametrize(
    ("overlay", "autoscaler"), [("scaled", "HorizontalPodAutoscaler"), ("scaled-keda", "ScaledObject")]
)
def test_scaled_overlay_renders_and_every_resource_validates(overlay, autoscaler):
    resources = render(overlay)
    # one autoscaler only: KEDA makes and owns its HPA, a second one on the Deployment would fight it
    assert sorted(doc["kind"] for doc in resources) == sorted([*SCALED_KINDS, "Service", autoscaler])
    for doc in resources:
        validate(doc)


def test_keda_schema_catches_a_misspelt_field():
    jsonschema = pytest.importorskip("jsonschema")
    schema = schema_validator("keda-scaledobject-v1alpha1.json")
    scaled_object = by_kind(render("scaled-keda"))["ScaledObject"]
    schema.validate(scaled_object)
    scaled_object["spec"]["minReplicas"] = scaled_object["spec"].pop("minReplicaCount")
    with pytest.raises(jsonschema.ValidationError):
        schema.validate(scaled_object)
    scaled_object["spec"]["minReplicaCount"] = scaled_object["spec"].pop("minReplicas")
    scaled_object["spec"]["triggers"][0]["metdata"] = scaled_object["spec"]["triggers"][0].pop("metadata")
    with pytest.raises(jsonschema.ValidationError):
        schema.validate(scaled_object)


def test_scaled_pods_share_redis_and_the_files_directory():
    resources = render("scaled")
    _check_deployment(resources)  # probes, drain, security: as in the base
    kinds = by_kind(resources)
    config, deployment = kinds["ConfigMap"]["data"], kinds["Deployment"]
    assert {"MT_REDIS_URL", "MT_REPLICAS"} <= set(config)
    assert all(k[3:].lower() in settings_fields() for k in config)
    # MT_REDIS_URL names the Redis Service, on its port, and that Service selects the Redis pods
    url = urlparse(config["MT_REDIS_URL"])
    redis_services = [d for d in resources if d["kind"] == "Service" and d["metadata"]["name"] == url.hostname]
    (redis_service,) = redis_services
    assert url.scheme == "redis" and redis_service["spec"]["ports"][0]["port"] == url.port
    redis = kinds["StatefulSet"]
    assert redis_service["spec"]["selector"].items() <= redis["spec"]["template"]["metadata"]["labels"].items()
    assert "--appendonly" in _container(redis)["args"] and "noeviction" in _container(redis)["args"]
    # MT_REPLICAS bounds what a key gets while Redis is down (rate / MT_REPLICAS per pod): the most pods the HPA runs
    assert int(config["MT_REPLICAS"]) == kinds["HorizontalPodAutoscaler"]["spec"]["maxReplicas"]
    # MT_STATE_DIR/files on a ReadWriteMany claim; the rest of the state directory stays per pod
    mounts = {m["mountPath"]: m["name"] for m in _container(deployment)["volumeMounts"]}
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    files = volumes[mounts[config["MT_STATE_DIR"] + "/files"]]
    claim = kinds["PersistentVolumeClaim"]
    assert files["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert "emptyDir" in volumes[mounts[config["MT_STATE_DIR"]]]


def test_rolling_updates_and_disruptions_drain_one_pod_at_a_time():
    kinds = by_kind(render("scaled"))
    deployment, budget = kinds["Deployment"], kinds["PodDisruptionBudget"]
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert budget["spec"] == {
        "maxUnavailable": 1,
        "selector": {"matchLabels": deployment["spec"]["selector"]["matchLabels"]},
    }


def test_adapter_rules_validate_and_schema_catches_a_misspelt_field():
    jsonschema = pytest.importorskip("jsonschema")
    rules = adapter_rules()
    schema_validator("prometheus-adapter-rules.json").validate(rules)
    rules[0]["seriesQuerry"] = rules[0].pop("seriesQuery")
    with pytest.raises(jsonschema.ValidationError):
        schema_validator("prometheus-adapter-rules.json").validate(rules)
    assert load_yaml(ADAPTER_VALUES)["rules"]["default"] is False


def test_hpa_scales_on_the_adapters_metric_of_the_services_gauge():
    from service.observability.metrics import Metrics

    gauge = {m.name: m for m in Metrics().registry.collect()}["mt_queue_depth"]
    assert gauge.type == "gauge"
    hpa = by_kind(render("scaled"))["HorizontalPodAutoscaler"]
    (pods,) = [m["pods"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"]
    assert any(m["type"] == "Resource" and m["resource"]["name"] == "cpu" for m in hpa["spec"]["metrics"])
    (rule,) = adapter_rules()
    assert rule["seriesQuery"].startswith(gauge.name + "{")
    assert rule["name"]["as"] == pods["metric"]["name"]
    # the pod is a resource the metric attaches to (a Pods metric), and the models are summed away per pod
    assert {v["resource"] for v in rule["resources"]["overrides"].values()} == {"namespace", "pod"}
    assert rule["metricsQuery"].replace(" ", "").startswith("sum(<<.Series>>{<<.LabelMatchers>>})by(<<.GroupBy>>)")
    assert pods["target"]["type"] == "AverageValue"


def test_scaled_object_matches_the_hpa():
    hpa = by_kind(render("scaled"))["HorizontalPodAutoscaler"]["spec"]
    keda = by_kind(render("scaled-keda"))["ScaledObject"]["spec"]
    assert keda["scaleTargetRef"] == hpa["scaleTargetRef"]
    assert (keda["minReplicaCount"], keda["maxReplicaCount"]) == (hpa["minReplicas"], hpa["maxReplicas"])
    assert keda["advanced"]["horizontalPodAutoscalerConfig"]["behavior"] == hpa["behavior"]
    triggers = {t["type"]: t for t in keda["triggers"]}
    (pods,) = [m["pods"] for m in hpa["metrics"] if m["type"] == "Pods"]
    prometheus = triggers["prometheus"]
    assert prometheus["metricType"] == "AverageValue"  # KEDA divides the total by the pod count: per-pod target
    assert prometheus["metadata"]["threshold"] == pods["target"]["averageValue"]
    assert "mt_queue_depth{" in prometheus["metadata"]["query"]
    (cpu,) = [m["resource"] for m in hpa["metrics"] if m["type"] == "Resource"]
    assert triggers["cpu"]["metadata"]["value"] == str(cpu["target"]["averageUtilization"])


def test_promtool_parses_the_queries_of_the_adapter_and_keda(tmp_path):
    """The adapter's metricsQuery with its template filled as the adapter fills it for an HPA, and KEDA's query."""
    promtool = tool("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (scripts/install-test-tools.sh installs prometheus)")
    (rule,) = adapter_rules()
    filled = (
        rule["metricsQuery"]
        .replace("<<.Series>>", "mt_queue_depth")
        .replace("<<.LabelMatchers>>", 'namespace="default",pod=~"mtserve-a|mtserve-b"')
        .replace("<<.GroupBy>>", "namespace,pod")
    )
    keda = by_kind(render("scaled-keda"))["ScaledObject"]
    (query,) = [t["metadata"]["query"] for t in keda["spec"]["triggers"] if t["type"] == "prometheus"]
    series = rule["seriesQuery"]
    groups = {
        "groups": [
            {"name": "q", "rules": [{"record": f"q{i}", "expr": e} for i, e in enumerate([filled, query, series])]}
        ]
    }
    path = tmp_path / "queries.yml"
    path.write_text(json.dumps(groups))
    result = run([promtool, "check", "rules", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr
    # and a broken query fails the same check (so the check is not vacuous)
    groups["groups"][0]["rules"][0]["expr"] = filled.replace(")", "", 1)
    path.write_text(json.dumps(groups))
    assert run([promtool, "check", "rules", str(path)]).returncode != 0
