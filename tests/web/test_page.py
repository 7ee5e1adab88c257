"""The real page in headless Chromium against the real server (espeak fallback voice):
playing, stopping, the token, the frame parser and the worklet (fixtures: conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from harness.live import LiveServer, run_live_server
from server.config import Settings
from tests.web.conftest import SAMPLE_RATE_HZ, load, tts_state, wait_state

pytestmark = [pytest.mark.browser, pytest.mark.live]


@pytest.fixture(scope="module")
def open_server() -> Iterator[LiveServer]:
    with run_live_server(Settings(engine="espeak")) as server:
        yield server


def wait_next_worklet_report(page: Any, after_ms: float) -> dict[str, Any]:
    """The first worklet report received after page time `after_ms` (heartbeat: 250 ms)."""
    return wait_state(page, f"s.worklet && s.worklet.receivedAt > {after_ms}")["worklet"]


def set_speed(page: Any, speed: float) -> None:
    page.eval_on_selector(
        "#speed",
        "(el, v) => { el.value = String(v); el.dispatchEvent(new Event('input')); }",
        speed,
    )
    assert page.text_content("#speed-value") == f"{speed:.2f}"


def test_play_streams_default_text_through_the_worklet(page: Any, open_server: LiveServer) -> None:
    """Play in LLM-streaming mode: engine shown, segments cover the text, audio is played out."""
    load(page, open_server)
    assert page.is_checked("#stream-mode")
    text = page.input_value("#text")
    assert len(text) > 20
    set_speed(page, 2.0)  # half the real-time playout, same code path

    page.click("#play")
    state = wait_state(page, "s.contextState === 'done'")

    assert state["connected"] is True
    assert state["speed"] == 2.0
    assert state["engine"] and page.text_content("#engine") == state["engine"]
    assert state["errors"] == []
    sent = state["sent"]
    assert sent[0] == "start" and sent[-1] == "end"
    assert sent.count("text") > 3, "the text went out as many small deltas"
    assert "".join(seg["text"] for seg in state["segments"]) == text
    assert [seg["index"] for seg in state["segments"]] == list(range(len(state["segments"])))
    assert page.locator("#segments li").count() == len(state["segments"]) >= 2

    done = state["done"]
    assert done["cancelled"] is False
    assert done["segments"] == len(state["segments"])
    assert state["framesReceived"] > 0
    assert state["sequenceGaps"] == 0
    assert done["audioSamples"] == state["samplesReceived"] > SAMPLE_RATE_HZ // 2
    # The worklet really ran: every received sample went out of the audio graph.
    assert state["samplesPlayed"] == state["samplesReceived"]
    assert state["bufferedMs"] == 0

    ttfa_ms = int(page.text_content("#ttfa") or "")
    ttfa_played_ms = int(page.text_content("#ttfa-played") or "")
    assert 0 <= ttfa_ms <= ttfa_played_ms
    assert (ttfa_ms, ttfa_played_ms) == (state["ttfaMs"], state["ttfaPlayedMs"])
    assert int(page.text_content("#underruns") or "") == state["underruns"]


@pytest.mark.parametrize("speed", [0.25, 4.0])
def test_the_speed_slider_reaches_both_ends_of_the_servers_range(
    page: Any, open_server: LiveServer, speed: float
) -> None:
    """The slider spans the server's speed range (0.25-4): either end is what `started` confirms."""
    load(page, open_server)
    set_speed(page, speed)
    page.click("#play")
    state = wait_state(page, "s.speed !== null")
    assert state["speed"] == speed
    assert state["errors"] == []
    page.click("#stop")


def test_stop_cancels_and_silences_at_once(page: Any, open_server: LiveServer) -> None:
    """Stop mid-stream sends cancel, gets a cancelled done, and empties the worklet at once."""
    load(page, open_server)
    # Long enough that its deltas are still going out when Stop is pressed.
    page.fill("#text", "今天天气很好，我们一起去公园散步吧！" * 12)

    page.click("#play")
    wait_state(page, f"s.samplesPlayed > {SAMPLE_RATE_HZ // 10}")
    stopped_at_ms = page.evaluate("performance.now()")
    page.click("#stop")

    state = wait_state(page, "s.done !== null")
    assert state["sent"][0] == "start" and state["sent"][-1] == "cancel"
    assert "end" not in state["sent"]
    assert state["done"]["cancelled"] is True
    assert state["contextState"] == "cancelled"
    assert state["errors"] == []
    assert state["bufferedMs"] == 0

    # Nothing more leaves the worklet: its lifetime output counter stands still. Reports
    # posted before the clear arrive within a few ms; these come well after it.
    first = wait_next_worklet_report(page, stopped_at_ms + 300)
    assert first["bufferedSamples"] == 0
    later = wait_next_worklet_report(page, page.evaluate("performance.now()") + 300)
    assert later["bufferedSamples"] == 0
    assert later["totalPlayedSamples"] == first["totalPlayedSamples"]
    assert tts_state(page)["samplesPlayed"] == state["samplesPlayed"]


def test_token_is_required_and_checked(page: Any) -> None:
    """A wrong token shows an auth error in the page; the right one plays (and is kept)."""
    settings = Settings(engine="espeak", tokens=("s3cret-token",))
    with run_live_server(settings) as server:
        load(page, server)
        page.uncheck("#stream-mode")
        page.fill("#text", "你好，世界。")

        page.fill("#token", "wrong-token")
        page.click("#play")
        state = wait_state(page, "s.errors.length > 0")
        assert [err["code"] for err in state["errors"]] == ["unauthorized"]
        assert state["connected"] is False
        assert state["contextState"] == "idle"
        assert page.get_attribute("#status", "data-state") == "refused"
        assert "unauthorized" in (page.text_content("#log .error") or "")

        page.fill("#token", "s3cret-token")
        page.press("#token", "Tab")  # commit: the token is kept in localStorage
        page.click("#play")
        state = wait_state(page, "s.contextState === 'done'")
        assert state["connected"] is True
        assert state["sent"] == ["start", "text", "end"]
        assert state["samplesPlayed"] == state["samplesReceived"] > 0
        assert state["done"]["cancelled"] is False
        assert page.evaluate("localStorage.getItem('tts.token')") == "s3cret-token"

        # After a reload the kept token is used again.
        load(page, server)
        assert page.input_value("#token") == "s3cret-token"
        page.fill("#text", "再见。")
        page.click("#play")
        state = wait_state(page, "s.contextState === 'done'")
        assert state["errors"] == [] and state["done"]["cancelled"] is False


def test_audio_frame_header_is_stripped_and_pcm_scaled(page: Any, open_server: LiveServer) -> None:
    """parseAudioFrame reads the 12-byte LE header and maps int16 LE to [-1, 1)."""
    load(page, open_server)
    parsed = page.evaluate(
        """async () => {
          const { parseAudioFrame } = await import('/web/player.js');
          const buf = new ArrayBuffer(12 + 6);
          const v = new DataView(buf);
          v.setUint32(0, 7, true); v.setUint32(4, 2, true); v.setUint32(8, 300, true);
          [-32768, 0, 16384].forEach((x, i) => v.setInt16(12 + 2 * i, x, true));
          const f = parseAudioFrame(buf);
          let odd = null;
          try { parseAudioFrame(new ArrayBuffer(12 + 3)); } catch (e) { odd = e.message; }
          return { ...f, samples: Array.from(f.samples), odd };
        }"""
    )
    assert (parsed["stream"], parsed["segment"], parsed["sequence"]) == (7, 2, 300)
    assert parsed["samples"] == [-1.0, 0.0, 0.5]
    assert "odd" in parsed["odd"]


def test_worklet_prebuffers_plays_out_after_end_and_counts_underruns(
    page: Any, open_server: LiveServer
) -> None:
    """Below the prebuffer nothing plays until end; running dry mid-stream is one underrun."""
    load(page, open_server)
    result = page.evaluate(
        """async () => {
          const { Player } = await import('/web/player.js');
          const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
          const until = async (cond) => {  // bounded poll
            for (let i = 0; i < 100 && !cond(); i++) await sleep(50);
            return cond();
          };
          const player = new Player({ prebufferMs: 100 });
          let last = null;
          player.onstate = (s) => { last = s; };
          await player.open(24000);
          await until(() => player.context.currentTime > 0.05);  // the clock runs
          const ms = (n) => new Float32Array(24 * n).fill(0.1);
          const out = {};

          player.begin();
          player.push(ms(50));  // half the prebuffer: must wait
          await sleep(300);
          await until(() => last && last.bufferedSamples > 0);
          out.waiting = { ...last };
          player.end();         // ...until the stream is over
          await until(() => last.drained);
          out.ended = { ...last };

          player.begin();
          player.push(ms(150)); // plays, then runs dry before the stream ends
          await until(() => last.underruns > 0);
          await sleep(100);
          out.dry = { ...last };
          player.push(ms(150));
          player.end();
          await until(() => last.drained);
          out.after = { ...last };
          await player.context.close();
          return out;
        }"""
    )
    assert result["waiting"]["playedSamples"] == 0
    assert result["waiting"]["bufferedSamples"] == 24 * 50
    assert result["ended"]["playedSamples"] == 24 * 50
    assert result["ended"]["drained"] is True
    assert result["ended"]["underruns"] == 0
    assert result["dry"]["playedSamples"] == 24 * 150
    assert result["dry"]["underruns"] == 1
    assert result["after"]["playedSamples"] == 24 * 300
    assert result["after"]["drained"] is True
    assert result["after"]["underruns"] == 1


#: Each Han character of the page drawn alone in the page's own font, and a code point no
#: font has (the missing-glyph box, "tofu"), as hashes of the drawn pixels' alpha.
DRAW_HAN = r"""() => {
  const text = document.body.innerText + document.querySelector('#text').value;
  const chars = [...new Set([...text].filter((c) => /\p{Script=Han}/u.test(c)))];
  const font = getComputedStyle(document.body).fontFamily;
  const canvas = document.createElement('canvas');
  canvas.width = canvas.height = 32;
  const ctx = canvas.getContext('2d', { willReadFrequently: true });
  const draw = (c) => {
    ctx.clearRect(0, 0, 32, 32);
    ctx.font = `24px ${font}`;
    ctx.fillText(c, 2, 26);
    const alpha = ctx.getImageData(0, 0, 32, 32).data.filter((_, i) => i % 4 === 3);
    return alpha.reduce((h, a) => (h * 31 + a) >>> 0, 7);
  };
  return { chars, images: chars.map(draw), tofu: draw('\u{10FFFD}') };
}"""


def test_the_pages_chinese_renders_with_real_glyphs(page: Any, open_server: LiveServer) -> None:
    """Every Han character on the page draws a glyph of its own in the page's font: none
    is the missing-glyph box, and no two look alike (the boxes all do)."""
    load(page, open_server)
    drawn = page.evaluate(DRAW_HAN)
    assert len(drawn["chars"]) > 30, drawn["chars"]
    boxes = [c for c, image in zip(drawn["chars"], drawn["images"], strict=True) if image == drawn["tofu"]]  # fmt: skip
    assert boxes == [], f"drawn as the missing-glyph box: {''.join(boxes)} (no CJK font?)"
    assert len(set(drawn["images"])) == len(drawn["chars"])
