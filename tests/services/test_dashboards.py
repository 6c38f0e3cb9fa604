"""The Grafana dashboard, its provisioning and Prometheus's scrape config agree with what the
services export: every metric a panel queries is one the projector's or the coordinator's
Prometheus registry (as the services build them) serves."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry

from little_services.projection import SqliteProjectionStore
from little_services.projector import ProjectorMetrics
from little_services.resume_coordinator._metrics import Metrics
from tests.paths import REPO

DASHBOARDS = REPO / "deploy/grafana/dashboards"
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "info": ("_info",),
}
_PROMQL_WORDS = {"sum", "by", "rate", "increase", "histogram_quantile", "max", "min", "le"}


def exported(registry: CollectorRegistry) -> set[str]:
    """The series names a registry serves on /metrics, by each family's type."""
    names: set[str] = set()
    for family in registry.collect():
        names |= {family.name + suffix for suffix in _SUFFIXES[family.type]}
    return names


def services_metrics(tmp_path: Path) -> set[str]:
    store = SqliteProjectionStore(tmp_path / "projection.sqlite3")
    try:
        projector = CollectorRegistry()
        ProjectorMetrics(projector, store)
        return exported(projector) | exported(Metrics().registry)
    finally:
        store.close()


def queried(dashboard: dict) -> set[str]:  # type: ignore[type-arg]
    """The metric names of every panel's PromQL (an identifier not followed by ``(``, outside
    label matchers and grouping lists)."""
    names: set[str] = set()
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = re.sub(r"\{[^}]*\}|\bby \([^)]*\)|\[[^\]]*\]", " ", target["expr"])
            for word in re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()", expr):
                if word not in _PROMQL_WORDS and not word.isdigit():
                    names.add(word)
    return names


def test_every_dashboard_is_valid_json_with_queries(tmp_path: Path) -> None:
    files = sorted(DASHBOARDS.glob("*.json"))
    assert files
    for path in files:
        dashboard = json.loads(path.read_text())
        assert dashboard["uid"] == "little-overview", path.name
        assert dashboard["title"], path.name
        targets = [t for p in dashboard["panels"] for t in p.get("targets", [])]
        assert targets, f"{path.name} queries nothing"
        assert all(t["datasource"]["uid"] == "prometheus" for t in targets)


def test_every_metric_the_dashboard_queries_is_one_the_services_export(tmp_path: Path) -> None:
    available = services_metrics(tmp_path)
    assert "little_projector_events_folded_total" in available  # the names are the real ones
    assert "little_coordinator_calls_total" in available
    for path in sorted(DASHBOARDS.glob("*.json")):
        used = queried(json.loads(path.read_text()))
        assert used, path.name
        unknown = sorted(used - available)
        assert not unknown, f"{path.name} queries metrics no service exports: {unknown}"
        # both services are on it
        assert any(n.startswith("little_projector_") for n in used)
        assert any(n.startswith("little_coordinator_") for n in used)


def test_every_metric_the_services_export_has_a_panel(tmp_path: Path) -> None:
    store = SqliteProjectionStore(tmp_path / "projection.sqlite3")
    try:
        projector = CollectorRegistry()
        ProjectorMetrics(projector, store)
        families = {
            f.name: {f.name + suffix for suffix in _SUFFIXES[f.type]}
            for r in (projector, Metrics().registry)
            for f in r.collect()
        }
    finally:
        store.close()
    used = set().union(*(queried(json.loads(p.read_text())) for p in DASHBOARDS.glob("*.json")))
    missing = sorted(name for name, series in families.items() if not series & used)
    assert not missing, f"metrics on no dashboard panel: {missing}"


def test_the_check_catches_a_metric_no_service_exports(tmp_path: Path) -> None:
    typo = {
        "panels": [{"targets": [{"expr": "sum(rate(little_projector_events_fold_total[5m]))"}]}]
    }
    assert queried(typo) - services_metrics(tmp_path) == {"little_projector_events_fold_total"}


def test_compose_provisions_grafana_and_prometheus_scrapes_both_services() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    services = compose["services"]
    grafana_mounts = {v.split(":")[0]: v.split(":")[1] for v in services["grafana"]["volumes"]}
    assert grafana_mounts["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"
    dashboards_at = grafana_mounts["./deploy/grafana/dashboards"]
    provider = yaml.safe_load(
        (REPO / "deploy/grafana/provisioning/dashboards/little.yaml").read_text()
    )
    assert provider["providers"][0]["options"]["path"] == dashboards_at
    datasource = yaml.safe_load(
        (REPO / "deploy/grafana/provisioning/datasources/prometheus.yaml").read_text()
    )["datasources"][0]
    assert datasource["uid"] == "prometheus"
    assert datasource["url"] == "http://prometheus:9090"
    prometheus_mount = services["prometheus"]["volumes"][0].split(":")
    config = yaml.safe_load((REPO / prometheus_mount[0]).read_text())
    targets = {
        t for job in config["scrape_configs"] for c in job["static_configs"] for t in c["targets"]
    }
    ports = {
        name: services[name]["environment"]["LITTLE_HTTP_PORT"]
        for name in ("projector", "resume-coordinator")
    }
    assert targets == {f"{name}:{port}" for name, port in ports.items()}
