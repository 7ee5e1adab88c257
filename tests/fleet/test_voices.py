"""Voices shared by every replica through the real Redis store (``--voices-store``): seen
everywhere as soon as a write returns, kept across restarts of the store and of every
replica, consistent after a crash mid-write, and clear errors while the store is away."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from chattts_client import StreamClient

from server.voices.voice import Voice, voice_from_record, voice_record
from tests.fleet.fleet import Fleet, Replica, cpu_hogs, free_port, requires_fleet, run_fleet

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


#: How many clients write voices at once, and how many each writes, for the read-after-write
#: test; each voice is then used on every replica by each of the three speech routes.
WRITERS, VOICES_EACH = 6, 4
LONG = "今天天气很好，我们一起去公园散步吧。" * 20


async def answers_on(http: httpx.AsyncClient, replica: Replica, voice: str) -> dict[str, str]:
    """What each speech route of ``replica``, addressed directly, answers for ``voice``
    (all three at once): "spoken", or the error code it refused with."""

    async def openai() -> str:
        body = {"model": "tts-1", "input": "好。", "voice": voice, "response_format": "pcm"}
        answer = await http.post(replica.url + "/v1/audio/speech", json=body)
        return "spoken" if answer.status_code == 200 else answer.json()["error"]["code"]

    async def tts() -> str:
        body = {"text": "好。", "voice": voice, "format": "pcm"}
        answer = await http.post(replica.url + "/v1/tts", json=body)
        return "spoken" if answer.status_code == 200 else answer.json()["error"]["code"]

    async def websocket() -> str:
        event = await first_answer(replica.ws_url, voice)
        return "spoken" if event["type"] == "started" else str(event["code"])

    codes = await asyncio.gather(openai(), tts(), websocket())
    return dict(zip(("/v1/audio/speech", "/v1/tts", "start"), codes, strict=True))


@pytest.mark.live
async def test_each_write_is_read_on_every_replica_at_once_under_load(tmp_path: Path) -> None:
    """Voices written through the balancer by concurrent clients while CPU hogs and long
    texts load the host and the replicas: each is spoken by /v1/audio/speech, /v1/tts and
    a WebSocket start on every replica straight after its POST returned, and refused
    voice_not_found by each of them straight after its DELETE returned, every time."""
    # Admission is not what this tests: room for every use at once on each replica.
    roomy = [["--max-streams", "64"]] * 3
    with run_fleet(3, tmp_path, extra_args=roomy) as fleet, cpu_hogs(4):
        misses: list[tuple[str, str, int, str, str]] = []

        async def use_everywhere(http: httpx.AsyncClient, name: str, expected: str) -> None:
            answers = await asyncio.gather(*(answers_on(http, r, name) for r in fleet.replicas))
            for replica, codes in zip(fleet.replicas, answers, strict=True):
                misses.extend(
                    (expected, name, replica.index, route, code)
                    for route, code in codes.items()
                    if code != expected
                )

        async def writer(w: int, http: httpx.AsyncClient) -> None:
            for i in range(VOICES_EACH):
                name = f"w{w}.v{i}"
                made = await http.post(fleet.url + "/v1/voices", json={"name": name, "seed": i})
                assert made.status_code == 201, made.text
                await use_everywhere(http, name, "spoken")
                gone = await http.delete(fleet.url + f"/v1/voices/{name}")
                assert gone.status_code == 204, gone.text
                await use_everywhere(http, name, "voice_not_found")

        async def busy(replica: Replica, http: httpx.AsyncClient) -> None:
            """Keeps ``replica``'s engine and encoders at work (long texts to mp3)."""
            while True:
                await http.post(replica.url + "/v1/tts", json={"text": LONG, "format": "mp3"})

        async with httpx.AsyncClient(timeout=TIMEOUT_S) as http:
            load = [asyncio.create_task(busy(r, http)) for r in fleet.replicas]
            try:
                await asyncio.gather(*(writer(w, http) for w in range(WRITERS)))
            finally:
                for task in load:
                    task.cancel()
                await asyncio.gather(*load, return_exceptions=True)
        uses = WRITERS * VOICES_EACH * 2 * 3 * len(fleet.replicas)
        assert misses == [], f"{len(misses)} of {uses} uses missed: {misses[:10]}"


@pytest.mark.live
async def test_the_speech_path_reads_the_store_not_a_copy_no_change_reached(
    tmp_path: Path,
) -> None:
    """Voices changed in Redis with no change published (as if none had reached the
    replicas yet): a new one is spoken by every route of every replica, one replaced
    speaks with its new seed, one removed is refused voice_not_found by each (its name in
    Chinese)."""
    records, versions = "chattts-stream:voices:espeak", "chattts-stream:voice-versions:espeak"
    chinese = "安静.v1"  # a Chinese name: a Redis field and a URL path segment too
    with run_fleet(2, tmp_path) as fleet, redis.Redis.from_url(fleet.store.url) as store:
        store.hset(records, chinese, json.dumps(voice_record(Voice(chinese, "espeak", seed=5))))
        async with httpx.AsyncClient(timeout=TIMEOUT_S) as http:
            for replica in fleet.replicas:
                codes = await answers_on(http, replica, chinese)
                assert set(codes.values()) == {"spoken"}, (replica.index, codes)
                assert (await first_answer(replica.ws_url, chinese))["seed"] == 5
            store.hset(records, chinese, json.dumps(voice_record(Voice(chinese, "espeak", seed=6))))
            store.hset(versions, chinese, store.incr("chattts-stream:voice-version"))
            for replica in fleet.replicas:
                assert (await first_answer(replica.ws_url, chinese))["seed"] == 6, replica.index
            store.hdel(records, chinese)
            store.hdel(versions, chinese)
            for replica in fleet.replicas:
                codes = await answers_on(http, replica, chinese)
                assert set(codes.values()) == {"voice_not_found"}, (replica.index, codes)


def stored_records(fleet: Fleet) -> dict[str, str]:
    """The espeak voices in the store, read with Redis's own client."""
    with redis.Redis.from_url(fleet.store.url, decode_responses=True) as store:
        return store.hgetall("chattts-stream:voices:espeak")


@pytest.mark.live
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


@pytest.mark.live
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
        message = refused.json()["error"]["message"]
        assert "unreachable" in message
        for internal in ("127.0.0.1", str(fleet.store.port), "Error", "Connection"):
            assert internal not in message, message  # the log has them, not the caller
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


@pytest.mark.live
async def test_a_frozen_store_delays_speech_no_longer_than_the_check_timeout(
    tmp_path: Path,
) -> None:
    """Redis frozen (SIGSTOP) while every connection to it stays open: a start in a known
    voice is spoken with the voices last seen after at most the check timeout (not the
    20 s store timeout), an unknown name is voices_unavailable; thawed, a voice created
    meanwhile is spoken."""
    args = ["--voices-store-timeout-s", "20", "--voices-store-check-timeout-ms", "300"]
    with run_fleet(1, tmp_path, extra_args=[args]) as fleet:
        replica = fleet.replicas[0]
        made = httpx.post(replica.url + "/v1/voices", json={"name": "kept", "seed": 7})
        assert made.status_code == 201, made.text
        assert fleet.store.process is not None
        fleet.store.process.send_signal(signal.SIGSTOP)
        try:
            began = time.monotonic()
            answer = await first_answer(replica.ws_url, "kept")
            assert (answer["type"], answer["seed"]) == ("started", 7), answer
            assert time.monotonic() - began < 10, "the start waited for the store's timeout"
            unknown = await first_answer(replica.ws_url, "nobody")
            assert unknown["code"] == "voices_unavailable", unknown
        finally:
            fleet.store.process.send_signal(signal.SIGCONT)
        with redis.Redis.from_url(fleet.store.url) as store:
            record = voice_record(Voice("thawed", "espeak", seed=9))
            store.hset("chattts-stream:voices:espeak", "thawed", json.dumps(record))
        async with asyncio.timeout(TIMEOUT_S):  # the replica reloads once the store answers
            while (answer := await first_answer(replica.ws_url, "thawed"))["type"] != "started":
                assert answer["code"] == "voices_unavailable", answer
                await asyncio.sleep(0.1)
        assert answer["seed"] == 9


@pytest.mark.live
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
