"""A fleet on loopback for tests and benchmarks: a real Redis, N server replicas and HAProxy in front.

Each part is its own process, started the way production starts it: ``redis-server``
with the append-only file on, each replica through the real CLI (``chattts-stream
serve``, the fallback voice unless told otherwise), and HAProxy from the shipped
``deploy/haproxy/haproxy.cfg`` with its ``server-template`` line replaced by the
replicas' loopback addresses. Ports are chosen by the OS, files live in a temporary
directory, every wait is bounded, and every process is reaped on exit.

    with run_fleet(3, tmp_path) as fleet:
        fleet.ws_url              # the balancer's WebSocket URL
        fleet.replicas[0].url     # one replica, addressed directly
        fleet.kill(0); fleet.start(0, extra_args=["--max-streams", "2"])
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "HAPROXY_CONFIG",
    "Balancer",
    "Fleet",
    "Replica",
    "Store",
    "cpu_hogs",
    "free_port",
    "http_get",
    "missing_binaries",
    "run_fleet",
]

ROOT = Path(__file__).resolve().parents[1]
HAPROXY_CONFIG = ROOT / "deploy" / "haproxy" / "haproxy.cfg"
#: Every wait here is a multiple of this (a replica imports torch: seconds on a busy CI).
TIMEOUT_S = 60.0
REDIS = shutil.which("redis-server")
HAPROXY = shutil.which("haproxy")


def missing_binaries() -> str | None:
    """Why a fleet cannot start here (the binaries not installed), or None."""
    missing = [name for name, path in (("redis-server", REDIS), ("haproxy", HAPROXY)) if not path]
    if not missing:
        return None
    return f"{' and '.join(missing)} not installed (Debian: redis-server, haproxy; scripts/setup.sh --test)"


def free_port() -> int:
    """A port the OS says is free now (the process that binds it comes next)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(what: str, check: object, timeout_s: float, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.05)
    tail = ""
    if log is not None and log.exists():
        tail = "\n" + "\n".join(log.read_text(errors="replace").splitlines()[-30:])
    raise TimeoutError(f"{what} within {timeout_s:.0f} s{tail}")


def _stop(process: subprocess.Popen[bytes] | None, sig: int, timeout_s: float) -> None:
    """Signal ``process`` and reap it; SIGKILL it if ``sig`` did not end it in time."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(sig)
    _reap(process, timeout_s)


def _reap(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout_s)


def http_get(url: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
    """(status, body) of a GET; status 0 when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


@dataclass
class Store:
    """``redis-server`` on a loopback port, its data (the append-only file) in ``directory``."""

    directory: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def log(self) -> Path:
        return self.directory / "redis.log"

    def start(self) -> None:
        assert REDIS is not None, missing_binaries()
        self.directory.mkdir(parents=True, exist_ok=True)
        # appendfsync always: a write is acknowledged once it is on disk (voice writes are
        # rare), as deploy/ configures it; no RDB snapshots, the AOF is the record.
        command = [REDIS, "--port", str(self.port), "--bind", "127.0.0.1",
                   "--dir", str(self.directory), "--appendonly", "yes",
                   "--appendfsync", "always", "--save", "", "--daemonize", "no"]  # fmt: skip
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        _wait("redis-server answers PING", self.answers, TIMEOUT_S, self.log)

    def answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        """SIGTERM: Redis flushes its append-only file and exits."""
        _stop(self.process, signal.SIGTERM, TIMEOUT_S)

    def kill(self) -> None:
        """SIGKILL: no chance to flush anything."""
        _stop(self.process, signal.SIGKILL, TIMEOUT_S)


class _OnLoopback:
    """A server on a loopback port: its HTTP and WebSocket addresses."""

    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/stream"


@dataclass
class Replica(_OnLoopback):
    """One server process (``chattts-stream serve``) on its own loopback port."""

    index: int
    directory: Path
    store_url: str | None
    args: list[str] = field(default_factory=list)
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        return self.directory / f"replica-{self.index}.log"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def command(self) -> list[str]:
        cli = Path(sys.executable).with_name("chattts-stream")
        base = [str(cli)] if cli.exists() else [sys.executable, "-m", "server"]
        command = [*base, "serve", "--engine", "espeak", "--host", "127.0.0.1",
                   "--port", str(self.port), "--log-level", "warning"]  # fmt: skip
        return [*command, *self.args]

    def start(self, *, wait: str = "ready") -> None:
        """Start the process; ``wait``: "ready" (/ready 200), "up" (/health 200, /ready
        past loading: a degraded replica), or "none"."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("TTS_")}
        # Voices of the directory store stay in this fleet's directory, never in $HOME.
        env["XDG_DATA_HOME"] = str(self.directory / f"data-{self.index}")
        env["TTS_BUSY_AT_UPGRADE"] = "true"
        if self.store_url is not None:
            env["TTS_VOICES_STORE"] = self.store_url
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, env=env
            )
        if wait == "ready":
            _wait(f"replica {self.index} ready", self._ready, TIMEOUT_S * 2, self.log)
        elif wait == "up":
            _wait(f"replica {self.index} up", self._settled, TIMEOUT_S * 2, self.log)

    def _exited(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"replica {self.index} exited ({self.process.returncode}):\n{tail}")

    def _ready(self) -> bool:
        self._exited()
        return http_get(self.url + "/ready")[0] == 200

    def _settled(self) -> bool:
        self._exited()
        status, body = http_get(self.url + "/ready")
        return status in (200, 503) and b'"state":"loading"' not in body

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        """Signal the process and reap it (SIGTERM drains first); its exit status."""
        _stop(self.process, sig, TIMEOUT_S)
        return None if self.process is None else self.process.returncode


@dataclass
class Balancer(_OnLoopback):
    """HAProxy from the shipped configuration, its servers the replicas on loopback."""

    directory: Path
    replicas: list[Replica]
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        return self.directory / "haproxy.log"

    @property
    def admin_socket(self) -> Path:
        return self.directory / "haproxy-admin.sock"

    def config(self) -> str:
        """The shipped configuration with loopback servers for its ``server-template``."""
        text = HAPROXY_CONFIG.read_text(encoding="utf-8")
        servers = "".join(
            f"    server {self.server_name(r.index)} 127.0.0.1:{r.port}\n" for r in self.replicas
        )
        text, templates = re.subn(r"^[ \t]*server-template .*\n", servers, text, flags=re.M)
        # Docker's DNS is not here (and nothing uses it once the template is gone).
        text, sections = re.subn(r"^resolvers docker\n(?:[ \t]+\S.*\n)*", "", text, flags=re.M)
        assert (templates, sections) == (1, 1), "deploy/haproxy/haproxy.cfg changed shape"
        return text

    @staticmethod
    def server_name(index: int) -> str:
        return f"tts{index + 1}"  # the names the shipped server-template gives

    def start(self) -> None:
        assert HAPROXY is not None, missing_binaries()
        path = self.directory / "haproxy.cfg"
        path.write_text(self.config(), encoding="utf-8")
        env = {**os.environ, "LB_BIND": f"127.0.0.1:{self.port}",
               "LB_ADMIN_SOCKET": str(self.admin_socket),
               "LB_CHECK_INTERVAL": "200ms"}  # fmt: skip
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [HAPROXY, "-db", "-f", str(path)], stdout=log, stderr=subprocess.STDOUT, env=env
            )
        _wait("haproxy listens", self._listens, TIMEOUT_S, self.log)

    def _listens(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"haproxy exited:\n{self.log.read_text(errors='replace')[-3000:]}")
        return http_get(self.url + "/health")[0] != 0

    def command(self, line: str) -> str:
        """One command of HAProxy's runtime API, its answer."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(str(self.admin_socket))
            sock.sendall(line.encode() + b"\n")
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def server_states(self) -> dict[int, str]:
        """Each replica's state as the balancer sees it: UP, DOWN, MAINT, "UP 1/2", ..."""
        rows = csv.DictReader(io.StringIO(self.command("show stat").lstrip("# ")))
        names = {self.server_name(r.index): r.index for r in self.replicas}
        return {names[row["svname"]]: row["status"] for row in rows if row["svname"] in names}

    def wait_states(self, expected: dict[int, str], timeout_s: float = TIMEOUT_S) -> None:
        """Until the balancer sees each replica of ``expected`` in its state (UP, DOWN)."""

        def reached() -> bool:
            states = self.server_states()
            return all(states.get(i) == state for i, state in expected.items())

        _wait(f"balancer states {expected}", reached, timeout_s, self.log)

    def stop(self) -> None:
        _stop(self.process, signal.SIGTERM, TIMEOUT_S)


@dataclass
class Fleet:
    """The running fleet: its store, its replicas and the balancer in front."""

    store: Store
    replicas: list[Replica]
    balancer: Balancer

    @property
    def url(self) -> str:
        """The balancer's HTTP base URL (what clients are given)."""
        return self.balancer.url

    @property
    def ws_url(self) -> str:
        """The balancer's WebSocket URL."""
        return self.balancer.ws_url

    def start(
        self, i: int, *, extra_args: Sequence[str] | None = None, wait: str = "ready"
    ) -> None:
        """Start replica ``i`` on its port (``extra_args``: its new flags, else its own)."""
        replica = self.replicas[i]
        assert not replica.running, f"replica {i} is running"
        if extra_args is not None:
            replica.args = list(extra_args)
        replica.start(wait=wait)

    def stop(self, i: int) -> int | None:
        """SIGTERM replica ``i`` (it drains) and wait for it to exit; its exit status."""
        return self.replicas[i].stop(signal.SIGTERM)

    def kill(self, i: int) -> None:
        """SIGKILL replica ``i``: no drain, no goodbye."""
        self.replicas[i].stop(signal.SIGKILL)

    def freeze(self, i: int) -> None:
        """SIGSTOP replica ``i``: it stops answering but closes nothing, as when the
        network to it is cut (its connections stay open; SIGKILL still ends it)."""
        process = self.replicas[i].process
        assert process is not None
        process.send_signal(signal.SIGSTOP)

    def restart(self, i: int, *, extra_args: Sequence[str] | None = None) -> None:
        """SIGTERM replica ``i``, wait for it, start it again on the same port."""
        self.stop(i)
        self.start(i, extra_args=extra_args)

    def stop_store(self) -> None:
        self.store.stop()

    def kill_store(self) -> None:
        self.store.kill()

    def start_store(self) -> None:
        self.store.start()

    def wait_balanced(self, timeout_s: float = TIMEOUT_S) -> None:
        """Until the balancer sees every running, ready replica UP and the others DOWN."""
        expected = {
            r.index: "UP" if r.running and http_get(r.url + "/ready")[0] == 200 else "DOWN"
            for r in self.replicas
        }
        self.balancer.wait_states(expected, timeout_s)


@contextlib.contextmanager
def run_fleet(
    replicas: int,
    directory: Path,
    *,
    extra_args: Sequence[Sequence[str]] = (),
    wait: Sequence[str] = (),
    shared_voices: bool = True,
) -> Iterator[Fleet]:
    """Start a store, ``replicas`` servers and the balancer; stop them all on exit.

    ``extra_args[i]``: replica i's extra flags; ``wait[i]``: how long to wait for it
    ("ready", "up": a degraded replica whose /ready is 503, "none"); ``shared_voices``:
    the replicas keep their voices in the store (else each its own directory).
    """
    store = Store(directory / "redis")
    members = [
        Replica(i, directory, store.url if shared_voices else None,
                list(extra_args[i]) if i < len(extra_args) else [])
        for i in range(replicas)
    ]  # fmt: skip
    balancer = Balancer(directory, members)
    fleet = Fleet(store, members, balancer)
    try:
        store.start()
        for replica in members:  # all at once: each takes seconds to import and warm up
            replica.start(wait="none")
        for replica in members:
            mode = wait[replica.index] if replica.index < len(wait) else "ready"
            if mode == "ready":
                _wait(f"replica {replica.index} ready", replica._ready, TIMEOUT_S * 2, replica.log)
            elif mode == "up":
                _wait(f"replica {replica.index} up", replica._settled, TIMEOUT_S * 2, replica.log)
        balancer.start()
        fleet.wait_balanced()
        yield fleet
    finally:
        balancer.stop()
        # All at once: each drains for a second or more before it exits.
        running = [r.process for r in members if r.process and r.process.poll() is None]
        for process in running:
            process.send_signal(signal.SIGTERM)
        for process in running:
            _reap(process, TIMEOUT_S)
        store.stop()


@contextlib.contextmanager
def cpu_hogs(count: int) -> Iterator[None]:
    """``count`` processes that spin on a CPU each until the block ends: the replicas'
    event loops are then late, as on a loaded host."""
    spin = "while True:\n    pass\n"
    hogs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(count)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait(TIMEOUT_S)
