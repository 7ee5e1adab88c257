"""The page through a rolling restart: served by two replicas behind the shipped HAProxy,
it plays a reply while its text is still going out; the replica speaking it drains
(SIGTERM). The page lets that replica finish what it accepted, continues the rest on a
new connection (the balancer sends it to the other replica) with the same voice, seed
and speed, in the same playback: every character heard once, in order, no error."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.fleet.fleet import requires_fleet, run_fleet
from tests.fleet.test_balancer import gauge
from tests.fleet.test_resume import REPLY, active_streams
from tests.web.conftest import WAIT_MS, browser, page, tts_state, wait_state  # noqa: F401

pytestmark = [requires_fleet, pytest.mark.slow, pytest.mark.browser, pytest.mark.live]

TEXT = REPLY * 2  # about 4 s of deltas at the pace set below, 10 s of audio at speed 2


def set_input(tab: Any, selector: str, value: str) -> None:
    tab.eval_on_selector(
        selector,
        "(el, v) => { el.value = v; el.dispatchEvent(new Event('input')); "
        "el.dispatchEvent(new Event('change')); }",
        value,
    )


def start_reply(tab: Any, url: str) -> None:
    """Open the page at ``url``, Play TEXT as an LLM would send it, until two segments."""
    tab.goto(url + "/", timeout=WAIT_MS)
    tab.wait_for_function("document.body.dataset.ready === '1'", timeout=WAIT_MS)
    assert tab.is_checked("#stream-mode")
    tab.fill("#text", TEXT)
    for selector, value in [
        ("#delta-min-chars", "1"), ("#delta-max-chars", "2"),
        ("#delta-min-ms", "60"), ("#delta-max-ms", "80"), ("#speed", "2"),
    ]:  # fmt: skip
        set_input(tab, selector, value)
    tab.click("#play")
    wait_state(tab, "s.segments.length >= 2")


def test_the_page_continues_a_reply_on_another_replica_when_its_replica_drains(
    page: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    with run_fleet(2, tmp_path) as fleet:
        start_reply(page, fleet.url)
        counts = active_streams(fleet)
        assert sorted(counts) == [0, 1], counts
        victim = counts.index(1)
        with ThreadPoolExecutor(1) as pool:  # SIGTERM, then wait for it to exit
            draining = pool.submit(fleet.stop, victim)
            # Played out at twice real time: seconds of audio after the text has gone.
            page.wait_for_function("window.ttsState.contextState === 'done'", timeout=WAIT_MS * 3)
            state = tts_state(page)
            assert draining.result() == 0  # the drained replica exited cleanly
    assert state["errors"] == []
    [resumed] = state["resumed"]
    assert resumed["reason"] == "draining" and 0 < resumed["startChar"] < len(TEXT)
    segments = state["segments"]
    assert "".join(seg["text"] for seg in segments) == TEXT  # each character once, in order
    assert [seg["index"] for seg in segments] == list(range(len(segments)))
    assert [seg["startChar"] for seg in segments[1:]] == [seg["endChar"] for seg in segments[:-1]]
    starts = [seg["audioStartSample"] for seg in segments]
    assert starts == sorted(starts) and starts[-1] < state["samplesReceived"]
    assert state["speed"] == 2.0 and state["sequenceGaps"] == 0
    done = state["done"]
    assert done["cancelled"] is False and done["segments"] == len(segments)
    assert done["audioSamples"] == state["samplesReceived"] == state["samplesPlayed"]


def test_stop_during_a_drain_leaves_no_stream_on_any_replica(
    page: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Stop pressed as the replica drains (before or while the page continues the reply
    elsewhere): playback stops, and no context is left open on either replica."""
    with run_fleet(2, tmp_path) as fleet:
        start_reply(page, fleet.url)
        counts = active_streams(fleet)
        victim = counts.index(1)
        with ThreadPoolExecutor(1) as pool:
            draining = pool.submit(fleet.stop, victim)
            # Seen draining, or already past it (the drained part spoken, the rest being
            # continued: `draining` is reset by the new connection, so it can be brief).
            wait_state(page, "s.draining || s.resumed.length > 0")
            page.click("#stop")
            assert draining.result() == 0
        state = wait_state(page, "s.contextState === 'cancelled'")
        survivor = 1 - victim
        deadline = time.monotonic() + 5.0
        while gauge(fleet, survivor, "tts_admitted_streams") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert gauge(fleet, survivor, "tts_admitted_streams") == 0
        assert active_streams(fleet) == [0, 0]
    assert state["errors"] == []


def test_the_page_continues_a_reply_on_another_replica_when_its_replica_is_killed(
    page: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    """SIGKILL of the replica speaking a reply (an abrupt close: no `draining`, no
    `done`): the page continues it on a new connection, which the balancer sends to the
    other replica, with the same voice, seed and speed, from the segment whose audio was
    cut (heard again under its own index), as the Python client does. Every character is
    in the segments once and in order, every sample received is played, and no error."""
    with run_fleet(2, tmp_path) as fleet:
        start_reply(page, fleet.url)
        before = tts_state(page)
        counts = active_streams(fleet)
        assert sorted(counts) == [0, 1], counts
        fleet.kill(counts.index(1))
        page.wait_for_function("window.ttsState.contextState === 'done'", timeout=WAIT_MS * 3)
        state = tts_state(page)
        assert active_streams(fleet)[1 - counts.index(1)] == 0  # the survivor finished it
    assert state["errors"] == [], state["errors"]
    [resumed] = state["resumed"]
    assert resumed["reason"] == "closed" and 0 <= resumed["startChar"] < len(TEXT)
    segments = state["segments"]
    assert "".join(seg["text"] for seg in segments) == TEXT  # each character once, in order
    assert [seg["index"] for seg in segments] == list(range(len(segments)))
    assert [seg["startChar"] for seg in segments[1:]] == [seg["endChar"] for seg in segments[:-1]]
    starts = {seg["startChar"]: seg["index"] for seg in segments}
    assert starts[resumed["startChar"]] == resumed["index"]  # it resumed at a segment's start
    # No timestamps are asked for, so the latest segment's audio may always have been cut.
    assert resumed["repeated"] is True and resumed["index"] >= len(before["segments"]) - 1
    assert (state["voice"], state["seed"], state["speed"]) == (None, before["seed"], 2.0)
    assert before["seed"] is not None and state["sequenceGaps"] == 0
    done = state["done"]
    assert done["cancelled"] is False and done["segments"] == len(segments)
    assert done["audioSamples"] == state["samplesReceived"] == state["samplesPlayed"]
