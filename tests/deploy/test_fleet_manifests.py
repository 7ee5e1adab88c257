"""deploy/ for a fleet: the HAProxy configuration, the fleet's compose file, and the
Kubernetes voice store, KEDA ScaledObject and Ingress, read against the code.

The fleet itself runs behind the same HAProxy configuration in tests/fleet/."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from server.config_input import build_settings
from tests.deploy.test_manifests import (
    DEPLOY,
    K8S,
    TARGET_LABELS,
    VOICE_STORE,
    compose_cli,
    config_data,
    dashboard,
    k8s_objects,
    labels_in,
    names_in,
    one,
    registry_series,
    server_port,
)

HAPROXY_CFG = DEPLOY / "haproxy" / "haproxy.cfg"
FLEET_COMPOSE = DEPLOY / "fleet" / "docker-compose.yml"
HAPROXY = shutil.which("haproxy")


def haproxy_lines(section: str) -> list[str]:
    """The directives of one section (``defaults``, ``backend replicas``), comments out."""
    lines, inside = [], False
    for raw in HAPROXY_CFG.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if line and not line[0].isspace():
            inside = line.strip() == section
            continue
        if inside and line.strip():
            lines.append(line.strip())
    assert lines, f"no section {section!r} in {HAPROXY_CFG}"
    return lines


def directive(section: str, name: str) -> str:
    found = [line for line in haproxy_lines(section) if line.split()[0] == name]
    assert len(found) == 1, f"{section}: expected one {name}, found {found}"
    return found[0]


def seconds(value: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = re.fullmatch(r"(\d+)([a-z]*)", value).groups()  # type: ignore[union-attr]
    return int(number) * units.get(unit, 0.001)  # HAProxy's default unit is ms


@cache
def fleet_compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(FLEET_COMPOSE.read_text(encoding="utf-8"))
    return loaded


# --- HAProxy ------------------------------------------------------------------------------


@pytest.mark.skipif(HAPROXY is None, reason="haproxy not installed (Debian: haproxy)")
def test_haproxy_accepts_the_configuration(tmp_path: Path) -> None:
    """`haproxy -c` accepts deploy/haproxy/haproxy.cfg as shipped."""
    assert HAPROXY is not None
    env = {**os.environ, "LB_ADMIN_SOCKET": str(tmp_path / "admin.sock")}
    check = subprocess.run([HAPROXY, "-c", "-f", str(HAPROXY_CFG)], capture_output=True,
                           text=True, env=env)  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr


def test_haproxy_balances_long_streams_and_retries_refusals() -> None:
    """Least connections, health from /ready, an hour-long tunnel, and a 503 or a refused
    connection retried on another replica, as often as there are other replicas."""
    backend = "backend replicas"
    assert directive(backend, "balance").split()[1:] == ["leastconn"]
    assert directive(backend, "option").split()[1:] == ["httpchk", "GET", "/ready"]
    assert directive(backend, "http-check").split()[1:] == ["expect", "status", "200"]
    timeouts = {
        line.split()[1]: seconds(line.split()[2])
        for line in haproxy_lines("defaults")
        if line.startswith("timeout ")
    }
    assert timeouts["tunnel"] >= 3600 and timeouts["server"] >= 120
    retry_on = directive("defaults", "retry-on").split()[1:]
    assert {"503", "conn-failure"} <= set(retry_on)
    assert "option redispatch 1" in haproxy_lines("defaults")
    retries = int(directive("defaults", "retries").split()[1])
    template = directive(backend, "server-template").split()
    slots, address = int(template[2]), template[3]
    replicas = fleet_compose()["services"]["tts"]["deploy"]["replicas"]
    assert slots >= replicas and retries >= replicas - 1
    port = int(fleet_compose()["services"]["tts"]["environment"]["TTS_PORT"])
    assert address == f"tts:{port}", "the template must name the compose service and its port"


# --- the fleet's compose file -------------------------------------------------------------


def test_fleet_compose_runs_replicas_the_balancer_and_the_store() -> None:
    """tts (replicas sharing voices in redis, refusing a full upgrade), haproxy from the
    shipped configuration, and redis writing every voice to disk before answering."""
    services = fleet_compose()["services"]
    assert set(services) == {"tts", "haproxy", "redis"}
    tts = services["tts"]
    settings = build_settings(None, environ=tts["environment"])
    assert settings.busy_at_upgrade and settings.voices_store is not None
    assert urlsplit(settings.voices_store).hostname == "redis"
    assert "ports" not in tts, "clients reach the replicas through the balancer only"
    haproxy = services["haproxy"]
    (mount,) = [v for v in haproxy["volumes"] if "haproxy.cfg" in v]
    assert (FLEET_COMPOSE.parent / mount.split(":")[0]).resolve() == HAPROXY_CFG
    bind = haproxy["environment"]["LB_BIND"]
    assert f"{bind.rsplit(':', 1)[1]}:" in haproxy["ports"][0]
    command = " ".join(services["redis"]["command"])
    assert "--appendonly yes" in command and "--appendfsync always" in command


@pytest.mark.skipif(
    compose_cli() is None, reason="neither `docker compose` nor docker-compose installed"
)
def test_docker_compose_config_accepts_the_fleet_file() -> None:
    cli = compose_cli()
    assert cli is not None
    check = subprocess.run(
        [*cli, "-f", str(FLEET_COMPOSE), "config", "--quiet"], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr


# --- Kubernetes ---------------------------------------------------------------------------


def test_the_voice_store_is_the_redis_the_config_names() -> None:
    """TTS_VOICES_STORE names redis.yaml's Service and port; Redis keeps every write on
    disk before answering, on a volume; its pods are not the server's."""
    url = urlsplit(config_data()["TTS_VOICES_STORE"])
    service = k8s_objects()["Service", VOICE_STORE]
    assert url.hostname == VOICE_STORE and url.port == service["spec"]["ports"][0]["port"]
    pod = k8s_objects()["StatefulSet", VOICE_STORE]["spec"]
    (redis,) = pod["template"]["spec"]["containers"]
    args = " ".join(redis["args"])
    assert "--appendonly yes" in args and "--appendfsync always" in args
    data = re.search(r"--dir (\S+)", args)
    assert data and [m["mountPath"] for m in redis["volumeMounts"]] == [data.group(1)]
    assert [t["metadata"]["name"] for t in pod["volumeClaimTemplates"]] == ["data"]
    labels = pod["template"]["metadata"]["labels"]
    assert not one("Service")["spec"]["selector"].items() <= labels.items()
    assert "redis.yaml" in yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]


def test_keda_scales_on_admitted_streams_against_the_measured_limit() -> None:
    """The ScaledObject targets the Deployment and divides admitted streams by a replica's
    limit, both exported metrics with the labels it selects on; its target is a share."""
    scaled = yaml.safe_load((K8S / "keda-scaledobject.yaml").read_text(encoding="utf-8"))
    assert scaled["kind"] == "ScaledObject"
    assert scaled["spec"]["scaleTargetRef"]["name"] == one("Deployment")["metadata"]["name"]
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    query = trigger["metadata"]["query"]
    metrics, _ = names_in(query)
    assert metrics == {"tts_admitted_streams", "tts_stream_limit"}
    assert metrics <= registry_series().keys()
    for metric, label in labels_in(query):
        assert label in TARGET_LABELS | registry_series()[metric or ""], label
    assert 0 < float(trigger["metadata"]["threshold"]) <= 1
    assert 1 <= scaled["spec"]["minReplicaCount"] <= scaled["spec"]["maxReplicaCount"]


def test_the_ingress_keeps_websockets_open_and_retries_refusals() -> None:
    """An hour of idle tunnel each way, nothing buffered, a 503 tried on the next pod,
    and the backend is the server's Service and port."""
    ingress = yaml.safe_load((K8S / "ingress.yaml").read_text(encoding="utf-8"))
    notes = ingress["metadata"]["annotations"]
    prefix = "nginx.ingress.kubernetes.io/"
    assert int(notes[prefix + "proxy-read-timeout"]) >= 3600
    assert int(notes[prefix + "proxy-send-timeout"]) >= 3600
    assert notes[prefix + "proxy-buffering"] == notes[prefix + "proxy-request-buffering"] == "off"
    assert "http_503" in notes[prefix + "proxy-next-upstream"].split()
    (rule,) = ingress["spec"]["rules"]
    backend = rule["http"]["paths"][0]["backend"]["service"]
    service = one("Service")
    assert backend["name"] == service["metadata"]["name"]
    (port,) = [p for p in service["spec"]["ports"] if p["name"] == backend["port"]["name"]]
    assert port["targetPort"] in ("http", server_port())


def test_the_dashboard_has_a_row_per_replica() -> None:
    """A Replicas row whose panels show each pod's load against its limit, its busy
    refusals and whether it drains."""
    panels = dashboard()["panels"]
    (row,) = [p for p in panels if p["type"] == "row" and p["title"].startswith("Replicas")]
    below = [p for p in panels if p["gridPos"]["y"] > row["gridPos"]["y"]]
    exprs = " ".join(t["expr"] for p in below for t in p["targets"])
    for metric in ("tts_admitted_streams", "tts_stream_limit", "tts_draining",
                   'tts_ws_sessions_refused_total{namespace="$namespace", pod=~"$pod", reason="busy"}'):  # fmt: skip
        assert metric in exprs, metric
    assert all("{{pod}}" in t["legendFormat"] for p in below for t in p["targets"])
