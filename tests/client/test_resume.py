"""The client's resumption against real servers on sockets (in this process): a drained
or lost context continues on the next server with the same voice, from the text not yet
heard; the bound on trying; text paced so that no server refuses it.

The fleet tests (tests/fleet/test_resume.py) do the same through the real balancer with
replicas killed and restarted as processes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from chattts_client import ContextResult, ResumeError, ResumePolicy, StreamClient
from chattts_client.client import SUBPROTOCOL
from websockets.asyncio.server import ServerConnection, serve

from harness.live import TIMEOUT_S, LiveServer, run_live_server
from server.config import Settings
from tests.relay import CuttableLink
from tests.scripted_engine import ScriptedEngine
from tests.spoken import heard_once, send_like_an_llm

pytestmark = pytest.mark.live

TEXT = "第一句话说完了。第二句话也说完了。第三句话还在说。第四句话到这里结束。"


@contextlib.contextmanager
def two_servers(**settings: object) -> Iterator[tuple[LiveServer, ScriptedEngine, ScriptedEngine]]:
    """Two servers with slow scripted engines (10 characters = 1 s of audio, made 5x
    faster than real time), so a context is still speaking when one of them goes."""
    engines = [ScriptedEngine(chunk_ms=100, chunk_delay_s=0.02, ms_per_char=100) for _ in "ab"]
    base = Settings(model_dir=Path("unused"), drain_timeout_s=TIMEOUT_S, **settings)  # type: ignore[arg-type]
    with (
        run_live_server(base, engine=lambda: (engines[0], False, None)) as first,
        run_live_server(base, engine=lambda: (engines[1], False, None)) as second,
    ):
        yield first, second, engines[0], engines[1]  # type: ignore[misc]


def drop_sessions(live: LiveServer) -> None:
    """The server's connections die with no goodbye (aborted on the server's loop)."""

    def abort_all() -> None:
        for session in list(live.state.sessions):  # type: ignore[attr-defined]
            session.transport.abort()

    live.on_loop(abort_all)


async def interrupted(client: StreamClient, interrupt: Callable[[], None]) -> ContextResult:
    """TEXT on a new context, sent like an LLM; ``interrupt()`` once a third went out."""
    ctx = await client.open(seed=5)
    halfway = asyncio.Event()
    feeding = asyncio.create_task(send_like_an_llm(client, ctx, TEXT, halfway=halfway))
    collecting = asyncio.create_task(client.collect(ctx, timeout_s=TIMEOUT_S))
    await halfway.wait()
    interrupt()
    result = await collecting
    await feeding
    return result


async def test_a_drained_context_continues_on_the_next_server_with_its_voice() -> None:
    """A drain mid-context: the drained server speaks what it accepted, the rest goes to
    the next server with the same voice, seed (the server's pick) and speed, and is heard
    after it; nothing is heard twice, and a `resumed` event says where it continued."""
    with two_servers() as (first, second, first_engine, second_engine):
        async with StreamClient.connect([first.ws_url, second.ws_url]) as client:
            ctx = await client.start(voice="m1", speed=1.25)
            interrupt = asyncio.Event()
            feeding = asyncio.create_task(send_like_an_llm(client, ctx, TEXT, halfway=interrupt))
            await interrupt.wait()
            first.server.handle_exit(signal.SIGTERM, None)
            result = await client.collect(ctx, timeout_s=TIMEOUT_S)
            await feeding
    assert heard_once(result, TEXT) == 0
    [resumed] = result.resumed
    assert (resumed["reason"], resumed["repeated"]) == ("draining", False)
    assert 0 < resumed["start_char"] < len(TEXT)
    assert result.started is not None and first_engine.requests and second_engine.requests
    voices = {r.voice for r in first_engine.requests + second_engine.requests}
    assert len(voices) == 1  # the same speaker, seed and speed on both servers
    [voice] = voices
    assert (voice.seed, voice.speed) == (result.started["seed"], 1.25) and voice.voice
    # The resumed part was the drained server's leftover: its samples follow without a gap.
    resumed_at = next(s for s in result.segments if s["start_char"] == resumed["start_char"])
    assert resumed_at["audio_start_sample"] == resumed["audio_start_sample"]


async def test_an_abrupt_close_resumes_at_the_segment_that_was_cut() -> None:
    """The connection dies mid-context with no goodbye (the server drops it): the context
    goes on on the next server from the start of the segment whose audio may have been
    cut, which is heard again, announced as repeated; every other character once."""
    with two_servers() as (first, second, _, second_engine):
        async with StreamClient.connect([first.ws_url, second.ws_url]) as client:
            ctx = await client.open(seed=7)
            interrupt = asyncio.Event()
            feeding = asyncio.create_task(send_like_an_llm(client, ctx, TEXT, halfway=interrupt))
            collecting = asyncio.create_task(client.collect(ctx, timeout_s=TIMEOUT_S))
            await interrupt.wait()
            await asyncio.sleep(0.3)  # a segment's audio on its way
            drop_sessions(first)
            result = await collecting
            await feeding
    assert heard_once(result, TEXT) == 1
    [resumed] = result.resumed
    assert (resumed["reason"], resumed["repeated"]) == ("closed", True)
    assert second_engine.requests and {r.voice.seed for r in second_engine.requests} == {7}
    repeated = [s for s in result.segments if s["index"] == resumed["index"]]
    assert len(repeated) == 2 and repeated[0]["text"] == repeated[1]["text"]
    assert repeated[1]["audio_start_sample"] == resumed["audio_start_sample"]


async def test_resumption_ends_in_resume_error_when_no_server_takes_the_context() -> None:
    """The only server goes away for good: the client tries as its policy says (3 tries
    within 2 s) and then raises ResumeError naming the context and where its text stopped."""
    engine = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.02, ms_per_char=100)
    settings = Settings(model_dir=Path("unused"), drain_timeout_s=0)
    policy = ResumePolicy(attempts=3, within_s=2.0, backoff_s=0.1)
    with run_live_server(settings, engine=lambda: (engine, False, None)) as live:
        async with StreamClient.connect(live.ws_url, resume=policy) as client:
            ctx = await client.open(seed=1)
            await client.send_text(TEXT, ctx)
            collecting = asyncio.create_task(client.collect(ctx, timeout_s=TIMEOUT_S))
            await asyncio.sleep(0.3)  # speaking
            live.server.handle_exit(signal.SIGTERM, None)  # drain 0: closes at once
            began = time.monotonic()
            with pytest.raises(ResumeError) as failed:
                await collecting
            waited_s = time.monotonic() - began
    error = failed.value
    assert error.code == "resume_failed" and error.context_id == ctx
    assert error.body["attempts"] == 3 and 0 <= error.body["unspoken_from_char"] < len(TEXT)
    assert isinstance(error.__cause__, OSError)  # nothing listens there any more
    assert waited_s < TIMEOUT_S


async def test_a_resuming_client_paces_text_so_that_no_delta_is_refused() -> None:
    """Deltas longer than max_text_message_chars and more text than max_buffered_chars:
    the client splits and paces them; all of it is spoken, with no error."""
    engine = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.01, ms_per_char=50)
    settings = Settings(model_dir=Path("unused"), max_text_message_chars=10, max_buffered_chars=30)
    text = TEXT * 2
    with run_live_server(settings, engine=lambda: (engine, False, None)) as live:
        async with StreamClient.connect(live.ws_url) as client:
            ctx = await client.open(seed=1)
            await client.send_text(text, ctx)
            await client.end(ctx)
            result = await client.collect(ctx, timeout_s=TIMEOUT_S)
    assert heard_once(result, text) == 0 and not result.resumed


async def test_a_network_cut_without_a_close_is_noticed_by_keepalive_and_resumed() -> None:
    """The network between client and server goes silent mid-context (no FIN, no RST):
    the client's keepalive ping gets no pong, so within three times ``keepalive_s`` the
    connection counts as lost and the context continues on the next server from the
    segment that was cut, every other character heard once."""
    with two_servers() as (first, second, _, second_engine):
        async with CuttableLink(first.base_url) as link:
            urls = [link.ws_url, second.ws_url]
            async with StreamClient.connect(urls, keepalive_s=0.3) as client:
                ctx = await client.open(seed=3)
                interrupt = asyncio.Event()
                feeding = asyncio.create_task(
                    send_like_an_llm(client, ctx, TEXT, halfway=interrupt)
                )
                collecting = asyncio.create_task(client.collect(ctx, timeout_s=TIMEOUT_S))
                await interrupt.wait()
                link.cut()
                cut_at = time.monotonic()
                while not second_engine.requests:
                    await asyncio.sleep(0.02)
                moved_s = time.monotonic() - cut_at
                result = await collecting
                await feeding
    assert heard_once(result, TEXT) <= 1
    [resumed] = result.resumed
    assert resumed["reason"] == "closed"
    assert moved_s < 3.0  # 3 x keepalive_s and a connection (websockets' default: 50 s)


async def test_a_server_that_accepts_but_never_answers_costs_one_try() -> None:
    """Of three servers the second accepts connections and never answers (a stopped
    process): a context lost on the first waits ``try_timeout_s`` there, then goes on on
    the third; the client does not try the silent one again and again."""
    policy = ResumePolicy(try_timeout_s=0.5)
    with two_servers() as (first, second, _, second_engine), socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # the kernel completes each handshake; nothing ever answers
        silent_url = f"ws://127.0.0.1:{silent.getsockname()[1]}/v1/stream"
        async with StreamClient.connect(
            [first.ws_url, silent_url, second.ws_url], resume=policy
        ) as client:
            began = time.monotonic()
            result = await interrupted(client, lambda: drop_sessions(first))
            taken_s = time.monotonic() - began
    assert heard_once(result, TEXT) <= 1
    [resumed] = result.resumed
    assert resumed["reason"] == "closed" and resumed["attempts"] == 2
    assert second_engine.requests
    assert taken_s < TIMEOUT_S / 4


async def test_a_server_that_stops_after_ready_is_left_for_the_next_one() -> None:
    """Of three servers the second completes the handshake and sends ``ready``, then
    answers nothing (frozen after ready): a context lost on the first gets no answer to
    its ``start`` there within ``try_timeout_s``, so the next try connects anew and the
    context goes on on the third; no keepalive is needed to find that out."""
    policy = ResumePolicy(try_timeout_s=0.5)

    async def frozen(ws: ServerConnection) -> None:
        await ws.send(json.dumps({"type": "ready", "session_id": "x", "sample_rate": 24000}))
        await ws.wait_closed()  # reads nothing more, answers nothing

    async with serve(frozen, "127.0.0.1", 0, subprotocols=[SUBPROTOCOL]) as silent:  # type: ignore[list-item]
        silent_url = f"ws://127.0.0.1:{silent.sockets[0].getsockname()[1]}/v1/stream"
        with two_servers() as (first, second, _, second_engine):
            async with StreamClient.connect(
                [first.ws_url, silent_url, second.ws_url], keepalive_s=None, resume=policy
            ) as client:
                result = await interrupted(client, lambda: drop_sessions(first))
    assert heard_once(result, TEXT) <= 1
    [resumed] = result.resumed
    assert resumed["reason"] == "closed" and resumed["attempts"] == 2
    assert second_engine.requests


async def test_keepalive_zero_means_no_pings() -> None:
    """``keepalive_s=0`` turns pings off, as 0 does for the server's own setting (it used
    to fail every connection at once with a ping timeout)."""
    engine = ScriptedEngine(chunk_ms=100, chunk_delay_s=0.01, ms_per_char=50)
    with run_live_server(
        Settings(model_dir=Path("unused")), engine=lambda: (engine, False, None)
    ) as live:
        async with StreamClient.connect(live.ws_url, keepalive_s=0, resume=None) as client:
            ctx = await client.open(seed=2)
            await client.send_text(TEXT, ctx)
            await client.end(ctx)
            result = await client.collect(ctx, timeout_s=TIMEOUT_S)
    assert heard_once(result, TEXT) == 0
