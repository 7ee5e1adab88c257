"""The Wyoming listener's settings (docs/settings.md, group server): off by default,
loopback unless told otherwise."""

from __future__ import annotations

from dataclasses import dataclass

from server.declaration import bound_problems, option

__all__ = ["WyomingSettings"]


@dataclass(frozen=True)
class WyomingSettings:
    """Where Home Assistant's Wyoming protocol is served (server.wyoming)."""

    wyoming_port: int = option(
        0,
        "also serve Home Assistant's Wyoming protocol (TTS) on this TCP port (0: off; 10200 "
        "is the convention); it has no authentication: keep it on loopback or a private "
        "network, firewalled (docs/home-assistant.md). Its connections count against "
        "--max-connections and close after --ws-idle-timeout-s without an event",
        group="server",
        ge=0,
        le=65535,
        zero=" (off)",
    )
    wyoming_host: str = option(
        "127.0.0.1", "interface the Wyoming port binds (with --wyoming-port)", group="server"
    )

    def __post_init__(self) -> None:
        problems = bound_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
