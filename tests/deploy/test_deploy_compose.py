"""docker-compose.yml against the compose-spec schema, and the wiring between its services and files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from deploy_helpers import (
    COMPOSE_FILES,
    DEPLOY,
    ROOT,
    expected_compose_environment,
    load_yaml,
    run,
    setting_defaults,
    settings_fields,
    tool,
)

SERVICE_VARIANTS = {"mt": "gpu", "mt-cpu": "cpu", "mt-replica": "scaled"}  # service -> profile


def check_jsonschema() -> str:
    path = tool("check-jsonschema")
    if path is None:
        pytest.skip("check-jsonschema is not installed (part of the dev extra)")
    return path


def compose() -> dict:
    return load_yaml(ROOT / "docker-compose.yml")


def seconds(duration: str) -> float:
    total = 0.0
    for value, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", duration):
        total += float(value) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]
    return total


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda p: p.name)
def test_compose_file_matches_compose_spec(path):
    result = run([check_jsonschema(), "--builtin-schema", "vendor.compose-spec", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_spec_gate_rejects_a_wrong_file(tmp_path):
    bad = tmp_path / "docker-compose.yml"
    bad.write_text("services:\n  mt:\n    image: x\n    ports: 8000\n    stop_grace_periodd: 30s\n")
    result = run([check_jsonschema(), "--builtin-schema", "vendor.compose-spec", str(bad)])
    assert result.returncode != 0


def test_each_variant_has_its_profile_build_target_and_network_alias():
    services = compose()["services"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    for name, profile in SERVICE_VARIANTS.items():
        svc = services[name]
        assert svc["profiles"] == [profile]
        target = svc["build"]["target"]
        assert re.search(rf"^FROM \S+ AS {target}$", dockerfile, re.MULTILINE), target
        assert "mt" in svc["networks"]["default"]["aliases"], "Prometheus and nginx find replicas as 'mt'"
        drain = re.fullmatch(r"\$\{MT_DRAIN_SECONDS:-([0-9.]+)\}", svc["environment"]["MT_DRAIN_SECONDS"])
        assert drain and seconds(svc["stop_grace_period"]) >= float(drain.group(1)) + 5
        assert "/readyz" in " ".join(svc["healthcheck"]["test"])
        assert svc["environment"]["MT_HOST"] == "0.0.0.0"
    for name in ("prometheus", "grafana"):
        assert "profiles" not in services[name], f"{name} runs with every profile"


def test_gpu_variant_reserves_an_nvidia_gpu_and_cpu_variants_do_not():
    services = compose()["services"]
    devices = services["mt"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
    assert services["mt"]["build"]["target"] == "gpu" and services["mt"]["environment"]["MT_PROVIDERS"] == "cuda"
    for name in ("mt-cpu", "mt-replica"):
        assert "reservations" not in services[name].get("deploy", {}).get("resources", {})
        assert services[name]["build"]["target"] == "cpu" and services[name]["environment"]["MT_PROVIDERS"] == "cpu"


def test_scaled_profile_has_replicas_behind_nginx():
    services = compose()["services"]
    assert services["mt-replica"]["deploy"]["replicas"] >= 2
    assert "ports" not in services["mt-replica"], "replicas cannot share a host port; nginx publishes one"
    assert services["nginx"]["profiles"] == ["scaled"]
    conf = (DEPLOY / "nginx" / "nginx.conf").read_text()
    assert re.search(r"server\s+mt:8000\s+resolve", conf), "nginx must re-resolve the 'mt' alias"
    assert "resolver 127.0.0.11" in conf


def test_nginx_config_is_valid_for_nginx(tmp_path):
    """nginx -t on the shipped config; Debian's nginx (1.22) lacks `resolve`, so only that is adapted."""
    nginx = tool("nginx") or next((p for p in ("/usr/sbin/nginx",) if Path(p).exists()), None)
    if nginx is None:
        pytest.skip("nginx is not installed (scripts/install-test-tools.sh installs it)")
    conf = (DEPLOY / "nginx" / "nginx.conf").read_text()
    adapted = conf.replace("server mt:8000 resolve", "server 127.0.0.1:8000").replace(
        "pid /tmp/nginx.pid;", f"pid {tmp_path}/nginx.pid;"
    )
    assert adapted != conf
    (tmp_path / "nginx.conf").write_text(adapted)
    result = run(
        [nginx, "-t", "-q", "-p", str(tmp_path), "-e", str(tmp_path / "error.log"), "-c", str(tmp_path / "nginx.conf")]
    )
    assert result.returncode == 0, result.stdout + result.stderr + (tmp_path / "error.log").read_text()


def test_bind_mounts_point_at_files_in_the_repository():
    services = compose()["services"]
    mounts = {name: svc.get("volumes", []) for name, svc in services.items()}
    for name, volumes in mounts.items():
        for volume in volumes:
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), f"{name}: {source} does not exist"
    assert "./deploy/prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in mounts["prometheus"]
    assert any(v.startswith("./deploy/grafana/provisioning:/etc/grafana/provisioning") for v in mounts["grafana"])
    dashboards_target = next(v.split(":")[1] for v in mounts["grafana"] if v.startswith("./deploy/grafana/dashboards"))
    provider = load_yaml(DEPLOY / "grafana" / "provisioning" / "dashboards" / "mtserve.yml")
    assert provider["providers"][0]["options"]["path"] == dashboards_target


def test_every_setting_reaches_the_containers_with_the_services_default(monkeypatch):
    """x-mt-environment passes every MT_* setting through (the caller's value, else the service's default);
    a setting added to service/settings.py without a line here fails this test."""
    from service.settings import Settings, setting

    anchor = compose()["x-mt-environment"]
    assert anchor == expected_compose_environment()
    defaults = setting_defaults()
    for env, value in anchor.items():  # each default, given as the variable, parses back to the Settings default
        match = re.fullmatch(r"\$\{(MT_\w+):-(.*)\}", value)
        if not match:
            continue
        monkeypatch.setenv(env, match.group(2))
        assert setting(Settings(), env) == defaults[env], (env, match.group(2))
        monkeypatch.delenv(env)


def test_environment_names_real_settings_and_no_secret_values():
    fields = settings_fields()
    services = compose()["services"]
    for name in SERVICE_VARIANTS:
        env = services[name]["environment"]
        unknown = sorted(k for k in env if k.startswith("MT_") and k[3:].lower() not in fields)
        assert not unknown, f"{name}: not settings of the service: {unknown}"
        assert env["MT_API_KEYS"] == "${MT_API_KEYS:-}", "API keys come from the caller's environment only"
