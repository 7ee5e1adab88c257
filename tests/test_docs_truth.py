"""What README.md and docs/ say about flags, defaults, variables, routes, metrics and
messages, checked against the code that decides them."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

from server.cli import build_parser
from server.config import Settings
from server.declaration import specs
from server.metrics import Metrics
from streaming import protocol as p

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "client" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@cache
def text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


@cache
def flags() -> frozenset[str]:
    """Every flag of every subcommand (and the tokens file, which is not a setting)."""
    parser = build_parser()
    found = {option for action in parser._actions for option in action.option_strings}
    for action in parser._actions:
        for sub in getattr(action, "choices", None) or {}:
            subparser = action.choices[sub]  # type: ignore[index]
            for inner in subparser._actions:
                found.update(inner.option_strings)
    return frozenset(found)


def code_spans(source: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", source)


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_flag_named_exists(path: Path) -> None:
    named = {
        m
        for span in code_spans(text(path))
        for m in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]+", span)
    }
    # The benchmarks' own flags, and other programs' (pip, docker, setup.sh).
    bench = {m for f in (ROOT / "bench").glob("*.py")
             for m in re.findall(r"add_argument\(\s*\"(--[a-z0-9-]+)\"", f.read_text())}  # fmt: skip
    foreign = {"--gpus", "--build", "--index-url", "--dry-run", "--test", "--build-arg"}
    unknown = sorted(named - flags() - bench - foreign)
    assert not unknown, f"{path.name} names flags that do not exist: {unknown}"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_environment_variable_named_exists(path: Path) -> None:
    known = {spec.env for spec in specs(Settings)} | {"TTS_TOKENS", "TTS_TOKEN_FILE",
             "TTS_TORCH_SPEC", "TTS_PYTHON", "TTS_SKIP_APT"}  # fmt: skip
    named = set(re.findall(r"\bTTS_[A-Z0-9_]+\b", text(path)))
    unknown = sorted(named - known)
    assert not unknown, f"{path.name} names variables that do not exist: {unknown}"


def test_readme_limits_table_gives_the_real_defaults() -> None:
    defaults = {spec.flag: spec.default for spec in specs(Settings)}
    rows = re.findall(r"^\| `(--[a-z-]+)`[^|]*\| ([^|]+) \|", text(ROOT / "README.md"), re.M)
    assert len(rows) >= 8
    for flag, shown in rows:
        default = defaults[flag]
        assert float(shown.strip()) == float(default), (
            f"README: {flag} default {shown} != {default}"
        )


@pytest.mark.parametrize("path", [ROOT / "docs" / "settings.md"], ids=["settings.md"])
def test_the_settings_reference_lists_each_setting_once_with_its_default(path: Path) -> None:
    for spec in specs(Settings):
        assert text(path).count(f"| `{spec.flag}` | `{spec.env}` | `{spec.default_text}` |") == 1


def heading_anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a markdown file (code blocks skipped)."""
    prose = re.sub(r"^```.*?^```", "", text(path), flags=re.M | re.S)
    headings = re.findall(r"^#+ (.+)$", prose, re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(path: Path) -> None:
    """A link to another page of the repository, or to one of its headings, resolves."""
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text(path)):
        if re.match(r"[a-z]+:", target):
            continue  # a URL
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists() or (
            anchor and dest.suffix == ".md" and anchor not in heading_anchors(dest)
        ):
            broken.append(target)
    assert not broken, f"{path.name} links to what does not exist: {broken}"


@cache
def routes() -> frozenset[str]:
    """The HTTP routes the app declares (its OpenAPI paths) and the WebSocket."""
    from server.app import create_app

    app = create_app(Settings(engine="espeak"))
    return frozenset(app.openapi()["paths"]) | {"/v1/stream", "/docs"}


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_route_named_exists(path: Path) -> None:
    named = {m for span in code_spans(text(path)) for m in
             re.findall(r"(/v1/[a-z/_{}]*[a-z}]|/health|/ready|/metrics|/docs)(?![a-z])", span)}  # fmt: skip
    known = {re.sub(r"\{[^}]+\}", "{}", r) for r in routes()}
    unknown = sorted(n for n in named if re.sub(r"\{[^}]+\}", "{}", n.rstrip("/")) not in known)
    assert not unknown, f"{path.name} names routes that do not exist: {unknown}"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_metric_named_is_exported(path: Path) -> None:
    registry = Metrics().registry
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    exported = set()
    for family in registry.collect():
        exported.add(family.name)
        exported.update(family.name + suffix for suffix in suffixes.get(family.type, ("",)))
    named = set(re.findall(r"\btts_[a-z_]+\b", text(path)))
    # Recording rules (level:metric:op) are not metrics; neither is the tts_ prefix alone.
    unknown = sorted(n for n in named if n not in exported and n + "_total" not in exported)
    assert not unknown, f"{path.name} names metrics the server does not export: {unknown}"


def test_protocol_doc_lists_exactly_the_message_types() -> None:
    doc = text(ROOT / "docs" / "protocol.md")
    client = doc.split("\n## Client → server\n")[1].split("\n## ")[0]
    server = doc.split("\n## Server → client\n")[1].split("\n### ")[0]
    listed_client = set(re.findall(r"^\| `([a-z]+)` \|", client, re.M))
    listed_server = set(re.findall(r"^\| `([a-z]+)` \|", server, re.M))
    listed_server |= set(re.findall(r"^## Server → client: `([a-z]+)`", doc, re.M))
    assert listed_client == set(p._CLIENT_TYPES)
    server_types = {
        cls.__dataclass_fields__["type"].default
        for cls in vars(p).values()
        if isinstance(cls, type) and issubclass(cls, p.ServerMessage) and cls is not p.ServerMessage
    }
    assert listed_server == server_types


def test_a_404_is_counted_under_the_route_label_the_docs_give() -> None:
    """operations.md: route template, `unmatched` for 404s."""
    assert "`unmatched` for 404s" in text(ROOT / "docs" / "operations.md")
    from fastapi.testclient import TestClient

    from server.app import create_app

    app = create_app(Settings(engine="espeak", warm_up=False))
    with TestClient(app) as client:
        assert client.get("/no/such/route").status_code == 404
        scraped = client.get("/metrics").text
    assert 'tts_http_requests_total{route="unmatched",status="404"} 1.0' in scraped
