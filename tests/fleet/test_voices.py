"""Voices shared by every replica through the real Redis store (``--voices-store``): seen
everywhere as soon as a write returns, kept across restarts of the store and of every
replica, consistent after a crash mid-write, and clear errors while the store is away."""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from chattts_client import StreamClient

from server.voices.voice import voice_from_record
from tests.fleet.fleet import Fleet, Replica, free_port, requires_fleet, run_fleet

pytestmark = [requires_fleet, pytest.mark.slow]

TIMEOUT_S = 60.0


async def first_answer(url: str, voice: str) -> dict[str, Any]:
    """The server's answer to a ``start`` in ``voice`` on ``url``: started or an error."""
    async with StreamClient.connect(url) as tts:
        await tts.start("c", voice=voice)
        async with asyncio.timeout(TIMEOUT_S):
            while True:
                event = await tts.recv()
                if isinstance(event, dict) and event["type"] in ("started", "error"):
                    return event


async def speaks_on_every_replica(fleet: Fleet, voice: str, seed: int) -> None:
    """A context in ``voice`` opens on each replica, addressed directly, with its seed."""
    for replica in fleet.replicas:
        answer = await first_answer(replica.ws_url, voice)
        assert (answer["type"], answer.get("seed")) == ("started", seed), (replica.index, answer)


def stored_records(fleet: Fleet) -> dict[str, str]:
    """The espeak voices in the store, read with Redis's own client."""
    with redis.Redis.from_url(fleet.store.url, decode_responses=True) as store:
        return store.hgetall("chattts-stream:voices:espeak")


async def test_a_voice_is_seen_everywhere_at_once_and_survives_restarts(tmp_path: Path) -> None:
    """A voice created through the balancer opens a context on every replica at once
    (ten voices, each tried on each replica right after its POST returned); it outlives
    a restart and a SIGKILL of the store and a restart of every replica; deleted, it is
    gone from every replica at once."""
    with run_fleet(3, tmp_path) as fleet:
        async with httpx.AsyncClient(base_url=fleet.url, timeout=TIMEOUT_S) as http:
            for i in range(10):
                made = await http.post("/v1/voices", json={"name": f"v{i}", "speaker": "f3",
                                                           "seed": 100 + i})  # fmt: skip
                assert made.status_code == 201, made.text
                await speaks_on_every_replica(fleet, f"v{i}", 100 + i)
            fleet.stop_store()
            fleet.start_store()
            late = await http.post("/v1/voices", json={"name": "late", "seed": 1})
            assert late.status_code == 201, late.text  # the replicas reached the store again
            fleet.kill_store()  # acknowledged means on disk (appendfsync always)
            fleet.start_store()
            for i in range(len(fleet.replicas)):
                await asyncio.to_thread(fleet.restart, i)
            await speaks_on_every_replica(fleet, "v3", 103)
            for replica in fleet.replicas:
                listed = httpx.get(replica.url + "/v1/voices", params={"engine": "espeak"})
                names = {v["name"] for v in listed.json()["data"] if not v["preset"]}
                assert names == {"late", *(f"v{i}" for i in range(10))}, replica.index
            assert (await http.delete("/v1/voices/v3")).status_code == 204
            for replica in fleet.replicas:
                assert httpx.get(replica.url + "/v1/voices/v3").status_code == 404
                answer = await first_answer(replica.ws_url, "v3")
                assert answer.get("code") == "voice_not_found", (replica.index, answer)


async def test_while_the_store_is_away_errors_are_clear_and_it_recovers(tmp_path: Path) -> None:
    """With Redis stopped: writes and listings are 503 voices_unavailable, a known voice
    still speaks (the voices last seen), an unknown name is voices_unavailable, not
    voice_not_found; with Redis back, every replica follows its changes again."""
    with run_fleet(2, tmp_path) as fleet:
        first, second = (r.url for r in fleet.replicas)
        made = httpx.post(first + "/v1/voices", json={"name": "kept", "seed": 7})
        assert made.status_code == 201, made.text
        fleet.stop_store()
        refused = httpx.post(first + "/v1/voices", json={"name": "new", "seed": 8})
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "voices_unavailable"
        assert "unreachable" in refused.json()["error"]["message"]
        listed = httpx.get(second + "/v1/voices")
        assert listed.status_code == 503 and listed.json()["error"]["code"] == "voices_unavailable"
        assert (await first_answer(fleet.replicas[1].ws_url, "kept"))["seed"] == 7
        unknown = await first_answer(fleet.replicas[1].ws_url, "nobody")
        assert unknown["code"] == "voices_unavailable"
        fleet.start_store()
        made = None
        async with asyncio.timeout(TIMEOUT_S):
            while made is None or made.status_code == 503:
                await asyncio.sleep(0.1)
                made = httpx.post(first + "/v1/voices", json={"name": "new", "seed": 8})
        assert made.status_code == 201, made.text
        async with asyncio.timeout(TIMEOUT_S):  # the other replica resubscribes and reloads
            while (answer := await first_answer(fleet.replicas[1].ws_url, "new"))[
                "type"
            ] != "started":
                assert answer["code"] == "voices_unavailable", answer
                await asyncio.sleep(0.1)
        assert answer["seed"] == 8


def test_a_replica_sigkilled_mid_write_leaves_the_store_whole(tmp_path: Path) -> None:
    """Voices created on one replica from four threads until it is SIGKILLed: every voice
    it acknowledged is in the store, every record there is a whole voice, and the replica
    starts again."""
    with run_fleet(2, tmp_path) as fleet:
        victim = fleet.replicas[0]
        acknowledged: list[str] = []
        stop = threading.Event()

        def create(worker: int) -> None:
            with httpx.Client(base_url=victim.url, timeout=TIMEOUT_S) as http:
                for i in range(10_000):
                    if stop.is_set():
                        return
                    name = f"w{worker}-{i}"
                    try:
                        answer = http.post("/v1/voices", json={"name": name, "seed": i})
                    except httpx.HTTPError:
                        return  # the replica is gone
                    if answer.status_code == 201:
                        acknowledged.append(name)

        threads = [threading.Thread(target=create, args=(w,)) for w in range(4)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + TIMEOUT_S
        while len(acknowledged) < 40 and time.monotonic() < deadline:
            time.sleep(0.01)
        fleet.kill(0)
        stop.set()
        for thread in threads:
            thread.join(TIMEOUT_S)
        assert len(acknowledged) >= 40, "the replica acknowledged too few voices to test"
        records = stored_records(fleet)
        for name, record in records.items():
            voice_from_record(json.loads(record), engine="espeak", name=name)
        assert set(acknowledged) <= set(records)
        fleet.start(0)
        listed = httpx.get(victim.url + "/v1/voices").json()["data"]
        assert {v["name"] for v in listed if not v["preset"]} == set(records)


def test_a_replica_exits_when_its_store_cannot_be_reached(tmp_path: Path) -> None:
    """--voices-store naming a Redis that is not there: the server exits with status 3
    and one critical line naming the store (no traceback), before it loads an engine."""
    replica = Replica(0, tmp_path, f"redis://127.0.0.1:{free_port()}/0",
                      args=["--voices-store-timeout-s", "1"])  # fmt: skip
    replica.start(wait="none")
    assert replica.process is not None
    try:
        status = replica.process.wait(TIMEOUT_S)
    except subprocess.TimeoutExpired:
        replica.stop()
        raise
    log = replica.log.read_text()
    assert status == 3, log
    assert "CRITICAL" in log and "voices store redis://127.0.0.1" in log and "unreachable" in log
    assert "Traceback" not in log
