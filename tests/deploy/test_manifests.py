"""deploy/ against the live server: metric names, settings, ports and probes.

Everything here is read from the code (``Metrics()``, ``Settings``, ``server/cli.py``) so
that renaming a metric, a setting or the port breaks a test instead of a dashboard.
"""

from __future__ import annotations

import inspect
import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from server.config import Settings
from server.config_input import build_settings
from server.lifecycle import _GOING_AWAY_GRACE_S, uvicorn_config
from server.metrics import Metrics
from server.runtime.worker import EngineWorker
from tests.settings import environment_names

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
SCRAPE = DEPLOY / "prometheus" / "prometheus.yml"
DASHBOARD = DEPLOY / "grafana" / "chattts-stream.json"
OPERATIONS = ROOT / "docs" / "operations.md"

#: Labels Prometheus attaches to every scraped series (prometheus.yml relabelling).
TARGET_LABELS = frozenset({"job", "instance", "namespace", "pod", "node"})
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


# --- the live registry ---------------------------------------------------------------


@cache
def registry_series() -> dict[str, frozenset[str]]:
    """Every series name the server exports, with its labels (plus ``le`` on buckets)."""
    metrics = Metrics()
    labels_by_family: dict[str, frozenset[str]] = {}
    for collector in vars(metrics).values():
        describe = getattr(collector, "describe", None)
        if describe is None or collector is metrics.registry:
            continue
        for family in describe():
            # No public API lists a labelled metric's label names before it has children.
            labels_by_family[family.name] = frozenset(getattr(collector, "_labelnames", ()))
    series: dict[str, frozenset[str]] = {}
    for family in metrics.registry.collect():
        labels = labels_by_family[family.name]
        for suffix in _SUFFIXES[family.type]:
            extra = {"le"} if suffix == "_bucket" else set()
            series[family.name + suffix] = labels | extra
    return series


@cache
def registry_families() -> frozenset[str]:
    """Metric family names as written in server/metrics.py (counters with ``_total``)."""
    return frozenset(
        family.name + ("_total" if family.type == "counter" else "")
        for family in Metrics().registry.collect()
    )


# --- PromQL scanning ------------------------------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_SELECTOR = re.compile(r"\b(tts_[A-Za-z0-9_]*)\s*\{([^}]*)\}")
_MATCHER_LABEL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def names_in(expr: str) -> tuple[set[str], set[str]]:
    """(tts_* metric names, recording-rule names with a colon) an expression reads."""
    bare = _STRING.sub('""', expr)
    bare = re.sub(r"\{[^}]*\}", " ", bare)
    bare = re.sub(r"\[[^\]]*\]", " ", bare)
    bare = _GROUPING.sub(" ", bare)
    tokens = set(_IDENTIFIER.findall(bare))
    return {t for t in tokens if t.startswith("tts_")}, {t for t in tokens if ":" in t}


def labels_in(expr: str) -> Iterator[tuple[str | None, str]]:
    """(metric or None, label) for every label a selector matches or a clause groups by."""
    bare = _STRING.sub('""', expr)
    for metric, matchers in _SELECTOR.findall(bare):
        for label in _MATCHER_LABEL.findall(matchers):
            yield metric, label
    for grouping in _GROUPING.findall(bare):
        for label in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", grouping):
            yield None, label


def rule_groups() -> list[dict[str, Any]]:
    return yaml.safe_load(ALERTS.read_text(encoding="utf-8"))["groups"]


def all_rules() -> list[dict[str, Any]]:
    return [rule for group in rule_groups() for rule in group["rules"]]


def recorded_names() -> set[str]:
    return {rule["record"] for rule in all_rules() if "record" in rule}


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def dashboard_exprs() -> list[str]:
    def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in items:
            yield panel
            yield from panels(panel.get("panels", []))

    board = dashboard()
    exprs = [t["expr"] for p in panels(board["panels"]) for t in p.get("targets", [])]
    for variable in board["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            exprs.append(query["query"])
    return exprs


def promql_sources() -> list[tuple[str, str]]:
    """(where, expression) for every PromQL expression under deploy/."""
    sources = [(rule.get("record") or rule["alert"], rule["expr"]) for rule in all_rules()]
    sources += [("dashboard", expr) for expr in dashboard_exprs()]
    return sources


# --- Kubernetes objects ---------------------------------------------------------------


def yaml_files() -> list[Path]:
    return sorted(DEPLOY.rglob("*.yaml")) + sorted(DEPLOY.rglob("*.yml"))


@cache
def k8s_objects() -> dict[tuple[str, str], dict[str, Any]]:
    objects = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc and "kind" in doc and doc["kind"] != "Kustomization":
                objects[doc["kind"], doc["metadata"]["name"]] = doc
    return objects


#: The objects of the shared voice store (redis.yaml), apart from the server's own.
VOICE_STORE = "chattts-stream-redis"


def one(kind: str) -> dict[str, Any]:
    """The server's one object of ``kind`` (the voice store's own left aside)."""
    found = [obj for (k, name), obj in k8s_objects().items() if k == kind and name != VOICE_STORE]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def container() -> dict[str, Any]:
    containers = one("Deployment")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, "one server container per pod"
    return containers[0]


def config_data() -> dict[str, Any]:
    return one("ConfigMap")["data"]


def container_port(port: int | str) -> int:
    """A probe's or Service's port, resolving a port name against the container."""
    if isinstance(port, int):
        return port
    by_name = {p["name"]: p["containerPort"] for p in container()["ports"] if "name" in p}
    assert port in by_name, f"port name {port!r} is not a container port"
    return by_name[port]


def server_port() -> int:
    """The port the server binds in the pod: TTS_PORT from the ConfigMap, else the default."""
    return int(config_data().get("TTS_PORT", Settings().port))


def dockerfile() -> str:
    return (ROOT / "Dockerfile").read_text(encoding="utf-8").replace("\\\n", " ")


def dockerfile_instruction(name: str) -> list[str]:
    return [
        line.split(None, 1)[1]
        for line in dockerfile().splitlines()
        if line.split(None, 1)[:1] == [name]
    ]


def gibibytes(quantity: str) -> float:
    units = {"Ki": 2**-20, "Mi": 2**-10, "Gi": 1, "Ti": 2**10, "G": 1e9 / 2**30, "M": 1e6 / 2**30}
    for unit, factor in units.items():
        if quantity.endswith(unit):
            return float(quantity[: -len(unit)]) * factor
    return float(quantity) / 2**30


# --- tests ----------------------------------------------------------------------------


@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_yaml_parses(path: Path) -> None:
    """Every YAML file under deploy/ parses and holds at least one document."""
    docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    assert docs


def test_dashboard_is_valid_json_with_unique_panel_ids() -> None:
    """The Grafana dashboard parses, has a uid, and no two panels share an id."""
    board = dashboard()
    ids = [p["id"] for p in board["panels"]]
    assert board["uid"] and len(ids) == len(set(ids))


def test_promql_reads_only_exported_metrics() -> None:
    """Every tts_* name in alerts, recording rules and the dashboard is a live series."""
    series = registry_series()
    seen: set[str] = set()
    for where, expr in promql_sources():
        metrics, _ = names_in(expr)
        unknown = metrics - series.keys()
        assert not unknown, f"{where}: not exported by server/metrics.py: {sorted(unknown)}"
        seen |= metrics
    # The scanner must find something, or this test passes on a broken regex.
    assert {"tts_time_to_first_audio_seconds_bucket", "tts_engine_ready"} <= seen


def test_promql_labels_exist() -> None:
    """Every label a selector matches or an expression groups by exists on some series."""
    series = registry_series()
    every_label = TARGET_LABELS.union(*series.values())
    for where, expr in promql_sources():
        for metric, label in labels_in(expr):
            allowed = TARGET_LABELS | series[metric] if metric else every_label
            assert label in allowed, f"{where}: label {label!r} not on {metric or 'any series'}"


def test_recording_rules_referenced_are_defined() -> None:
    """Alerts and the dashboard only read recording rules that alerts.yml defines."""
    recorded = recorded_names()
    assert len(recorded) == sum("record" in r for r in all_rules()), "duplicate record names"
    for where, expr in promql_sources():
        _, recordings = names_in(expr)
        assert recordings <= recorded, f"{where}: undefined {sorted(recordings - recorded)}"


def test_required_recording_rules_and_alerts_exist() -> None:
    """TTFA P50/P95/P99, P95 RTF, errors by kind and the operational alerts are all there."""
    exprs = {r["record"]: r["expr"] for r in all_rules() if "record" in r}
    ttfa = [e for e in exprs.values() if "tts_time_to_first_audio_seconds_bucket" in e]
    assert {q for e in ttfa for q in re.findall(r"histogram_quantile\((0\.\d+)", e)} >= {
        "0.50",
        "0.95",
        "0.99",
    }
    assert any("0.95" in e and "tts_segment_rtf_bucket" in e for e in exprs.values())
    assert any("kind" in e and "tts_errors_total" in e for e in exprs.values())
    alerts = {r["alert"]: r["expr"] for r in all_rules() if "alert" in r}
    for metric in ("tts_engine_ready", "tts_engine_queue_depth", "tts_active_streams"):
        assert any(metric in e for e in alerts.values()), f"no alert reads {metric}"


def test_alerts_are_well_formed() -> None:
    """Each alert has a duration, a known severity and a summary; record names are level:metric:op."""
    for rule in all_rules():
        assert ("record" in rule) != ("alert" in rule), rule
        if "record" in rule:
            assert re.fullmatch(r"[a-z_]+:[a-z0-9_]+:[a-z0-9_]+", rule["record"]), rule["record"]
            continue
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]


def test_scrape_config_targets_the_metrics_port() -> None:
    """prometheus.yml scrapes /metrics under the job name the alerts select on."""
    jobs = yaml.safe_load(SCRAPE.read_text(encoding="utf-8"))["scrape_configs"]
    names = {job["job_name"] for job in jobs if job.get("metrics_path", "/metrics") == "/metrics"}
    used = set(re.findall(r'job="([^"]+)"', ALERTS.read_text(encoding="utf-8")))
    assert used and used <= names
    annotations = one("Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert int(annotations["prometheus.io/port"]) == server_port()
    assert annotations["prometheus.io/path"] == "/metrics"


def test_probes_hit_health_and_ready_on_the_server_port() -> None:
    """startup/readiness probe /ready, liveness /health, all on the port the server binds."""
    c = container()
    expected = {"startupProbe": "/ready", "readinessProbe": "/ready", "livenessProbe": "/health"}
    for probe, path in expected.items():
        get = c[probe]["httpGet"]
        assert get["path"] == path, probe
        assert container_port(get["port"]) == server_port(), probe
    # The model loads in the background: the startup budget must cover minutes, not seconds.
    startup = c["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300


def test_service_container_and_image_agree_on_the_port() -> None:
    """Service targetPort, containerPort, TTS_PORT and the Dockerfile's EXPOSE are one port."""
    service = one("Service")
    ports = [container_port(p["targetPort"]) for p in service["spec"]["ports"]]
    assert ports == [server_port()]
    assert [int(p) for p in dockerfile_instruction("EXPOSE")] == [server_port()]
    template_labels = one("Deployment")["spec"]["template"]["metadata"]["labels"]
    for kind in ("Service", "PodDisruptionBudget"):
        obj = one(kind)
        selector = obj["spec"]["selector"]
        selector = selector.get("matchLabels", selector)
        assert selector.items() <= template_labels.items(), f"{kind} selects no pod"


def test_server_listens_beyond_loopback_in_the_pod() -> None:
    """TTS_HOST (ConfigMap or image) is not the loopback default, or probes cannot connect."""
    env = dict(re.findall(r"\b(TTS_HOST)=(\S+)", " ".join(dockerfile_instruction("ENV"))))
    host = config_data().get("TTS_HOST", env.get("TTS_HOST", Settings().host))
    assert host not in {"127.0.0.1", "localhost", "::1"}


def test_configmap_keys_are_settings() -> None:
    """Every ConfigMap key is a TTS_* setting, a string, and the whole map passes validation."""
    data = config_data()
    known = environment_names() - {"TTS_TOKENS"}
    unknown = set(data) - known
    assert not unknown, f"not settings (or secrets in a ConfigMap): {sorted(unknown)}"
    assert all(isinstance(v, str) for v in data.values()), "ConfigMap values must be strings"
    settings = build_settings(None, environ=data)
    model_dir = settings.model_dir
    if model_dir is not None:
        mounts = [Path(m["mountPath"]) for m in container()["volumeMounts"]]
        assert any(model_dir.is_relative_to(m) for m in mounts), "model dir not on a volume"


def test_tokens_come_from_a_secret() -> None:
    """The container takes TTS_TOKENS from the Secret that secret.example.yaml describes."""
    secret = yaml.safe_load((K8S / "secret.example.yaml").read_text(encoding="utf-8"))
    keys = set(secret.get("stringData", {})) | set(secret.get("data", {}))
    assert keys and keys <= {"TTS_TOKENS", "TTS_TOKEN_FILE"}
    refs = [e["secretRef"]["name"] for e in container()["envFrom"] if "secretRef" in e]
    assert refs == [secret["metadata"]["name"]]


def test_one_gpu_per_pod_with_memory_bounds() -> None:
    """Each pod takes exactly one GPU and has a memory request no larger than its limit."""
    resources = container()["resources"]
    assert int(resources["limits"]["nvidia.com/gpu"]) == 1
    request = gibibytes(resources["requests"]["memory"])
    limit = gibibytes(resources["limits"]["memory"])
    assert 2 <= request <= limit


def test_grace_period_covers_prestop_and_shutdown() -> None:
    """terminationGracePeriodSeconds > preStop sleep + drain + uvicorn's and the engine's stop timeouts."""
    spec = one("Deployment")["spec"]["template"]["spec"]
    command = container()["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    uvicorn_s = uvicorn_config(None, Settings()).timeout_graceful_shutdown
    assert uvicorn_s is not None, "the server no longer bounds uvicorn's graceful shutdown"
    engine_stop = inspect.signature(EngineWorker.stop).parameters["timeout_s"].default
    drain_s = float(one("ConfigMap")["data"].get("TTS_DRAIN_TIMEOUT_S", Settings().drain_timeout_s))
    needed = float(command[1]) + drain_s + uvicorn_s + _GOING_AWAY_GRACE_S + engine_stop
    assert spec["terminationGracePeriodSeconds"] > needed


def test_pod_runs_unprivileged_without_service_links() -> None:
    """Non-root, no privilege escalation, and no service-link env that could shadow TTS_PORT."""
    spec = one("Deployment")["spec"]["template"]["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert container()["securityContext"]["allowPrivilegeEscalation"] is False
    assert spec["enableServiceLinks"] is False


def test_hpa_scales_the_deployment_on_an_exported_gauge() -> None:
    """The HPA targets the Deployment and scales on a per-pod metric the server exports."""
    hpa = yaml.safe_load((K8S / "hpa.yaml").read_text(encoding="utf-8"))
    assert hpa["spec"]["scaleTargetRef"]["name"] == one("Deployment")["metadata"]["name"]
    names = {m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"}
    assert names and names <= registry_series().keys()
    assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]


def test_kustomization_lists_existing_files() -> None:
    """kustomization.yaml names only files that exist; the rest are mentioned in it."""
    text = (K8S / "kustomization.yaml").read_text(encoding="utf-8")
    resources = yaml.safe_load(text)["resources"]
    assert all((K8S / r).is_file() for r in resources)
    for path in K8S.glob("*.yaml"):
        if path.name != "kustomization.yaml" and path.name not in resources:
            assert path.name in text, f"{path.name} is neither a resource nor explained"


def test_dockerfile_serves_with_a_health_check() -> None:
    """The image's HEALTHCHECK asks the server on whatever port TTS_PORT gives (no port
    written into it) and its ENTRYPOINT is the venv's `chattts-stream serve`."""
    (healthcheck,) = dockerfile_instruction("HEALTHCHECK")
    assert '"chattts-stream", "healthcheck"' in healthcheck.replace("/app/.venv/bin/", "")
    assert not re.search(r":\d{2,5}\b", healthcheck), healthcheck
    (entrypoint,) = dockerfile_instruction("ENTRYPOINT")
    argv = json.loads(entrypoint)
    assert Path(argv[0]).name == "chattts-stream" and argv[1:] == ["serve"]
    assert argv[0].startswith("/app/"), "the Deployment's securityContext note assumes /app"
    assert "command" not in container(), "the Deployment must not bypass the ENTRYPOINT"


def test_operations_doc_covers_every_metric_and_alert() -> None:
    """docs/operations.md names every exported metric family and every alert."""
    text = OPERATIONS.read_text(encoding="utf-8")
    missing = [name for name in sorted(registry_families()) if name not in text]
    missing += [r["alert"] for r in all_rules() if "alert" in r and r["alert"] not in text]
    assert not missing, f"undocumented: {missing}"


PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian: prometheus)")
def test_promtool_checks_the_rules_and_runs_their_unit_tests() -> None:
    """`promtool check rules` accepts alerts.yml; alerts.test.yml's cases pass: degraded
    fires on the flag (not on an intended fallback voice), server errors on fault="server"
    only."""
    assert PROMTOOL is not None
    check = subprocess.run(
        [PROMTOOL, "check", "rules", str(ALERTS)], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    tests = subprocess.run(
        [PROMTOOL, "test", "rules", "alerts.test.yml"],
        capture_output=True, text=True, cwd=ALERTS.parent,
    )  # fmt: skip
    assert tests.returncode == 0, tests.stdout + tests.stderr


def test_the_degraded_alert_reads_the_flag_and_errors_alert_on_server_faults() -> None:
    alerts = {r["alert"]: r["expr"] for r in all_rules() if "alert" in r}
    assert "tts_engine_degraded" in alerts["ChatTTSStreamDegraded"]
    exprs = {r["record"]: r["expr"] for r in all_rules() if "record" in r}
    assert 'fault="server"' in exprs["namespace:tts_server_errors:ratio_rate5m"]


def test_the_image_builds_in_two_stages_and_runs_unprivileged() -> None:
    """The compiler stays in the build stage; the runtime stage runs as a non-root user;
    torch's version is the one constraints.txt pins for the tests."""
    text = dockerfile()
    stages = re.split(r"^FROM ", text, flags=re.MULTILINE)[1:]
    assert len(stages) == 2 and stages[0].split()[2] == "build"
    build, runtime = stages
    assert "build-essential" in build and "build-essential" not in runtime
    assert "python3.11-dev" not in runtime and "--from=build" in runtime
    (user,) = dockerfile_instruction("USER")
    assert user.strip() not in {"root", "0"}
    pins = dict(
        line.split("==") for line in (ROOT / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )  # fmt: skip
    (torch_spec,) = [a for a in dockerfile_instruction("ARG") if a.startswith("TORCH_SPEC")]
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    (default_torch,) = re.findall(r"TTS_TORCH_SPEC:-(torch==[0-9.]+)", setup)
    assert f"{default_torch} " in torch_spec  # the image's torch is the tests' version
    assert "torchaudio" in pins  # pinned, not left to whatever ChatTTS resolves
    assert "-c constraints.txt" in (ROOT / "scripts" / "setup.sh").read_text()


DOCKER = shutil.which("docker")


def docker_works() -> bool:
    if DOCKER is None:
        return False
    return subprocess.run([DOCKER, "info"], capture_output=True).returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not docker_works(), reason="no Docker daemon on this machine")
def test_the_image_builds_and_answers_health() -> None:  # pragma: no cover - needs Docker
    assert DOCKER is not None
    build = subprocess.run(
        [DOCKER, "build", "-t", "chattts-stream:test", "."], cwd=ROOT, capture_output=True,
        text=True, timeout=3600,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    run = subprocess.run(
        [DOCKER, "run", "-d", "--rm", "-e", "TTS_PORT=8123", "chattts-stream:test"],
        capture_output=True, text=True,
    )  # fmt: skip
    container_id = run.stdout.strip()
    try:
        for _ in range(120):
            health = subprocess.run(
                [DOCKER, "exec", container_id, "/app/.venv/bin/chattts-stream", "healthcheck"],
                capture_output=True,
            )
            if health.returncode == 0:
                break
            time.sleep(1)
        assert health.returncode == 0
    finally:
        subprocess.run([DOCKER, "rm", "-f", container_id], capture_output=True)


# --- docker compose ---------------------------------------------------------------------

COMPOSE = DEPLOY / "docker-compose.yml"


@cache
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    return loaded


def test_compose_runs_the_server_prometheus_and_grafana_from_the_shipped_files() -> None:
    services = compose()["services"]
    assert set(services) == {"server", "prometheus", "grafana"}
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):  # a bind mount: it must exist
                assert (DEPLOY / source).exists() or source == "../models", (name, source)
    server = services["server"]
    port = int(server["environment"]["TTS_PORT"])
    assert f"{port}:{port}" in server["ports"]
    assert server["healthcheck"]["test"][1:] == ["/app/.venv/bin/chattts-stream", "healthcheck"]
    scrape = yaml.safe_load((DEPLOY / "compose" / "prometheus.yml").read_text())
    (job,) = scrape["scrape_configs"]
    assert job["static_configs"][0]["targets"] == [f"server:{port}"]
    assert {"namespace", "pod"} <= set(job["static_configs"][0]["labels"])
    assert (
        "./prometheus/alerts.yml:/etc/prometheus/alerts.yml:ro" in services["prometheus"]["volumes"]
    )
    datasource = yaml.safe_load(
        (DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text()
    )["datasources"][0]
    assert datasource["url"] == "http://prometheus:9090"
    provider = yaml.safe_load(
        (DEPLOY / "grafana" / "provisioning" / "dashboards" / "chattts-stream.yml").read_text()
    )["providers"][0]
    mounted = [
        v.split(":")[1] for v in services["grafana"]["volumes"] if "chattts-stream.json" in v
    ]
    assert mounted and mounted[0].startswith(provider["options"]["path"] + "/")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian: prometheus)")
def test_promtool_accepts_the_compose_prometheus_config(tmp_path: Path) -> None:
    assert PROMTOOL is not None
    shutil.copy(DEPLOY / "compose" / "prometheus.yml", tmp_path / "prometheus.yml")
    shutil.copy(ALERTS, tmp_path / "alerts.yml")  # where compose mounts it
    check = subprocess.run(
        [PROMTOOL, "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stdout + check.stderr


def compose_cli() -> list[str] | None:
    if DOCKER is not None and subprocess.run([DOCKER, "compose", "version"],
                                             capture_output=True).returncode == 0:  # fmt: skip
        return [DOCKER, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy else None


@pytest.mark.skipif(
    compose_cli() is None, reason="neither `docker compose` nor docker-compose installed"
)
def test_docker_compose_config_accepts_the_file() -> None:  # pragma: no cover - needs compose
    cli = compose_cli()
    assert cli is not None
    check = subprocess.run(
        [*cli, "-f", str(COMPOSE), "config", "--quiet"], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr
