// The page: one WebSocket to /v1/stream (protocol v1, docs/protocol.md), one player.
//
// When the server drains (a rolling restart, `draining`), it speaks what it accepted of
// the utterance; a Play utterance then continues on a new connection (a load balancer
// sends it to another server) with the same voice, seed and speed, from the character
// where the drained server stopped, in the same playback; `resumed` records where.
// When the connection is lost instead (the server crashed, the network cut it), the
// utterance continues the same way, as the Python client's resumption does
// (client/chattts_client/ledger.py): from the start of the segment whose audio may have
// been cut (heard again, under its own index), or after the last one heard, retried
// with a growing pause within RESUME_WITHIN_MS.
//
// `window.ttsState` is a read-only snapshot for tests and the curious. `contextState`
// is "idle" before the first Play, "speaking" from Play until the server's `done` AND
// the player has played everything out, then "done"; "cancelled" after Stop (or a
// `done` with cancelled: true); "refused" when the server refused its `start` (busy,
// an unknown voice, ...).
//
// Around the socket, over HTTP (web/api.js): the voice picker lists `GET /v1/voices`,
// the banner says when `GET /ready` reports a degraded server or random weights, and the
// alert tells a refused token (401) from a full or unready server (503).

import {
  describeRefusal,
  explainRefusal,
  fetchReadiness,
  fetchVoices,
  readinessWarnings,
} from "/web/api.js";
import { Player, parseAudioFrame } from "/web/player.js";
import {
  appendLog,
  markSegment,
  renderAlert,
  renderBanner,
  renderSegment,
  renderVoices,
} from "/web/view.js";
import { encodeWav, saveFile } from "/web/wav.js";

const SUBPROTOCOL = "tts.v1";
const TOKEN_PREFIX = "token.";
const TOKEN_STORAGE_KEY = "tts.token";
const DEFAULT_SAMPLE_RATE_HZ = 24000;
const MAX_LOG_ENTRIES = 200;
const READY_POLL_MS = 2000; // while /ready says the engine is still loading
// Continuing after a lost connection, as the Python client's ResumePolicy does.
const RESUME_ATTEMPTS = 8;
const RESUME_WITHIN_MS = 30000;
const RESUME_BACKOFF_MS = [100, 2000]; // first pause, doubling up to the second
// Close codes after which the page itself was at fault: the same frames would be refused
// again (protocol error, bad data, invalid UTF-8, policy, too large).
const CLIENT_FAULT_CLOSES = new Set([1002, 1003, 1007, 1008, 1009]);

const $ = (id) => document.getElementById(id);

const state = {
  connected: false,
  // idle (no connection yet) | connecting | connected | closed | refused | resuming
  connection: "idle",
  draining: false, // the server of this connection said `draining`
  sessionId: null,
  engine: null,
  sampleRate: null,
  limits: null,
  contextId: null,
  stream: null,
  voice: null, // as confirmed by `started`
  seed: null,
  speed: null, // as confirmed by `started`
  contextState: "idle",
  framesReceived: 0,
  samplesReceived: 0,
  samplesPlayed: 0,
  bufferedMs: 0,
  underruns: 0,
  sequenceGaps: 0,
  ttfaMs: null, // first text sent -> first audio frame received
  ttfaPlayedMs: null, // first text sent -> first sample handed to the audio output
  segments: [],
  done: null,
  errors: [],
  warnings: [],
  sent: [], // types of the client messages sent for the current context, in order
  // Where the utterance continued elsewhere: {reason: "draining" | "closed", startChar,
  // index, repeated (a segment cut by a lost connection is heard again), attempts}.
  resumed: [],
  voices: null, // the picker's names, from GET /v1/voices; null until listed
  alert: null, // {status, code, message}: the latest refusal (401 or 503), until cleared
  readiness: null, // the latest GET /ready body
  banner: [], // kinds shown in the banner: "degraded", "random-weights"
  // The worklet's latest report, of any stream: {gen, bufferedSamples, totalPlayedSamples,
  // receivedAt (performance.now())}. totalPlayedSamples counts every sample output ever.
  worklet: null,
};

Object.defineProperty(window, "ttsState", {
  get: () => structuredClone(state),
  enumerable: true,
});

const player = new Player({ prebufferMs: numberInput("prebuffer-ms", 100) });
let socket = null; // the open (or opening) WebSocket
let socketToken = null; // the token it was opened with
let socketReady = null; // Promise<WebSocket>, resolved on `ready`
let socketDraining = false; // the server said `draining`: nothing new goes to it
// The Play utterance across servers: its whole text (code points), where the current
// server context's characters, segments and samples begin in it, and what remains to
// be continued elsewhere once a drained server is done ({startChar} or null).
// Across legs, what was heard (as the Python client's ledger keeps it): characters before
// `heardChars` were heard completely; `openSegment` {index, startChar, endChar} is the
// segment whose audio may still be coming (its next segment event or `done` has not).
let utterance = newUtterance();
let deltaTimer = null; // pending timed delta of the "stream as an LLM" mode
let firstTextAt = null; // performance.now() of the first text sent in this context
let expectedSequence = 0;
let contextCounter = 0;
// {contextId, chain, base, drained, ended, legs, resuming} while a "type to speak" context
// is open (ended: Play sent its `end`; legs: continued after a lost connection).
let typeSession = null;
let held = null; // {frames, ended}: a queued context's audio, while the one before plays out
let resuming = false; // resumeAfterLoss is trying to connect
const finishWaiters = []; // serverFinished()'s
let refusedContextId = null; // the context whose `start` the server refused

function newUtterance() {
  return {
    chars: null,
    charBase: 0,
    segmentBase: 0,
    sampleBase: 0,
    continueAt: null,
    heardChars: 0,
    openSegment: null,
    startFields: null, // the `start` fields of its first leg (voice, seed, speed)
    voice: null, // voice, seed and speed as its first `started` confirmed them
    lostAt: null, // performance.now() of the first lost connection
    resumeAttempts: 0,
  };
}

// --- connection ---------------------------------------------------------------------

function socketUrl() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}/v1/stream`;
}

/** The connection, opened (or reused) with the current token; resolves on `ready`.
 * During a resumption a failed try only rejects: the resumption reports, if it gives up. */
function connect() {
  const token = $("token").value.trim();
  const reusable = socket && socketToken === token && !socketDraining;
  if (reusable && socket.readyState <= WebSocket.OPEN) return socketReady;
  if (socket) socket.close(1000);
  socketDraining = false;
  state.draining = false;
  const protocols = token ? [SUBPROTOCOL, TOKEN_PREFIX + token] : [SUBPROTOCOL];
  const ws = new WebSocket(socketUrl(), protocols);
  ws.binaryType = "arraybuffer";
  socket = ws;
  socketToken = token;
  setConnection(resuming ? "resuming" : "connecting");
  socketReady = new Promise((resolve, reject) => {
    let opened = false;
    let ready = false;
    ws.onopen = () => {
      opened = true;
    };
    ws.onmessage = (event) => {
      if (ws !== socket) return;
      if (typeof event.data === "string") {
        const msg = parseJson(event.data);
        if (msg && msg.type === "ready" && !ready) {
          ready = true;
          onReady(msg);
          resolve(ws);
        } else if (msg) {
          onEvent(msg);
        }
      } else {
        onAudio(event.data);
      }
    };
    ws.onclose = (event) => {
      if (ws !== socket) return;
      socket = null;
      state.connected = false;
      stopDeltas();
      if (resuming) {
        // A try of a resumption that failed before `ready`: the resumption tries again.
        reject(new Error(`connection closed (${event.code}) before ready`));
        return;
      }
      if (!opened) {
        setConnection("refused");
        explainRefusal(token).then((problem) => {
          showAlert(problem);
          addError({ code: problem.code, message: problem.message, context_id: null });
          reject(new Error(problem.message));
        });
        return;
      }
      setConnection("closed", event.code);
      // After `draining` the close is expected once the context here has its `done`.
      const cut = state.contextState === "speaking" && state.done === null;
      if (cut && resumable(event.code)) {
        void resumeAfterLoss(event.code); // lost mid-utterance: it goes on elsewhere
      } else if (socketDraining && !cut) {
        log("info", `the draining server closed the connection (${event.code})`);
      } else if (event.code !== 1000 && event.code !== 1005) {
        utterance.continueAt = null; // the drained server did not finish: nothing follows
        addError({
          code: `close_${event.code}`,
          message: `连接已断开 connection closed: ${event.code} ${event.reason || ""}`.trim(),
          context_id: null,
        });
      }
      if (state.contextState === "speaking" && !resuming) {
        playerEnd(); // play out what arrived; no more will come
      }
      if (!ready) reject(new Error(`connection closed (${event.code}) before ready`));
    };
  });
  socketReady.catch(() => {}); // rejections are reported in the log, not as unhandled
  return socketReady;
}

function setConnection(connection, code) {
  state.connection = connection;
  renderStatus(code);
}

/** The badge: the connection's state, or before there is one, the server's (GET /ready). */
function renderStatus(code) {
  const el = $("status");
  let shown = state.connection;
  let text = {
    connecting: "连接中 connecting…",
    connected: "已连接 connected",
    closed: `已断开 closed${code ? ` (${code})` : ""}`,
    refused: "被拒绝 refused",
    resuming: "重新连接中 reconnecting…",
  }[shown];
  if (shown === "idle") {
    const readiness = state.readiness;
    if (readinessUnreachable) {
      shown = "unreachable";
      text = "无法连接 server unreachable";
    } else if (readiness === null) {
      text = "空闲 idle";
    } else if (readiness.ready) {
      shown = "ready";
      text = `就绪 ready: ${readiness.engine}`;
    } else {
      shown = readiness.state === "loading" ? "loading" : "unavailable";
      text = readiness.state === "loading" ? "加载中 loading" : `不可用 ${readiness.state}`;
    }
  }
  el.dataset.state = shown;
  el.textContent = text;
}

function send(msg) {
  if (!socket || socket.readyState !== WebSocket.OPEN) return false;
  socket.send(JSON.stringify(msg));
  if (msg.context_id === state.contextId) state.sent.push(msg.type);
  return true;
}

function parseJson(text) {
  try {
    return JSON.parse(text);
  } catch {
    addError({ code: "bad_server_json", message: "server sent invalid JSON", context_id: null });
    return null;
  }
}

// --- server events ------------------------------------------------------------------

function onReady(msg) {
  state.connected = true;
  state.sessionId = msg.session_id;
  state.engine = msg.engine;
  state.sampleRate = msg.sample_rate;
  state.limits = msg.limits || null;
  setConnection("connected");
  $("engine").textContent = msg.engine;
  showAlert(null);
  void refreshReadiness();
  log("info", `ready: session ${msg.session_id}, ${msg.engine}, ${msg.sample_rate} Hz`);
}

function onEvent(msg) {
  switch (msg.type) {
    case "started":
      if (msg.context_id !== state.contextId) return;
      state.stream = msg.stream;
      state.voice = msg.voice;
      showAlert(null); // whatever was refused before, this context was not
      state.seed = msg.seed;
      state.speed = msg.speed;
      if (!utterance.voice) {
        // What every later leg of the utterance starts with (the seed the server chose).
        utterance.voice = { seed: msg.seed, speed: msg.speed };
        if (msg.voice) utterance.voice.voice = msg.voice;
      }
      if (msg.sample_rate !== player.sampleRateHz) {
        // Only reached if the page asked for another rate; the AudioContext must match.
        player.open(msg.sample_rate);
        player.begin();
      }
      log("info", `started: stream ${msg.stream}, voice ${msg.voice ?? "默认 default"}, ` +
        `seed ${msg.seed}, speed ${msg.speed}`);
      break;
    case "segment": {
      if (msg.context_id !== state.contextId) return;
      // Numbers of the whole utterance, also after it continued on another server.
      const seg = {
        ...msg,
        index: msg.index + utterance.segmentBase,
        start_char: msg.start_char + utterance.charBase,
        end_char: msg.end_char + utterance.charBase,
        audio_start_sample: msg.audio_start_sample + utterance.sampleBase,
      };
      seg.audio_start_ms = Math.round((seg.audio_start_sample / state.sampleRate) * 10000) / 10;
      // Everything before it was heard; its own audio is what may still be cut.
      utterance.heardChars = Math.max(utterance.heardChars, seg.start_char);
      utterance.openSegment = {
        index: seg.index, startChar: seg.start_char, endChar: seg.end_char,
      };
      const last = state.segments[state.segments.length - 1];
      if (last && last.index === seg.index) {
        // The segment a lost connection cut, heard again from its start: one entry.
        state.segments.pop();
        $("segments").lastElementChild?.remove();
      }
      state.segments.push({
        index: seg.index,
        text: seg.text,
        spoken: seg.spoken,
        startChar: seg.start_char,
        endChar: seg.end_char,
        audioStartSample: seg.audio_start_sample,
        audioStartMs: seg.audio_start_ms,
      });
      renderSegment($("segments"), seg);
      break;
    }
    case "draining":
      onDraining(msg);
      break;
    case "warning": {
      // Every warning is shown (the log keeps its code and message); one about a segment
      // of this utterance also marks that segment (e.g. segment_without_audio).
      const mine = msg.context_id === state.contextId && Number.isInteger(msg.segment);
      const segment = mine ? msg.segment + utterance.segmentBase : null;
      state.warnings.push({
        code: msg.code, message: msg.message, context_id: msg.context_id, segment,
      });
      const where = segment === null ? "" : ` (segment ${segment})`;
      log("warning", `${msg.code}: ${msg.message}${where}`);
      if (segment !== null) markSegment($("segments"), segment, msg.code, msg.message);
      break;
    }
    case "error":
      // The text and end sent after a refused start only echo the refusal.
      if (msg.context_id === refusedContextId && msg.code === "unknown_context") return;
      if (msg.code === "draining" && msg.context_id === state.contextId &&
          (utterance.continueAt !== null || (typeSession && typeSession.drained))) {
        // A delta that crossed `draining` on the wire: it is continued, not lost.
        log("info", "text sent while the server drained goes to the next server");
        return;
      }
      addError({ code: msg.code, message: msg.message, context_id: msg.context_id });
      if (msg.code === "busy") showAlert(describeRefusal(503, msg, socketToken));
      const current = msg.context_id === state.contextId && state.contextState === "speaking";
      if (current && state.stream === null) onStartRefused(msg);
      break;
    case "done":
      if (msg.context_id === (typeSession && typeSession.contextId)) typeSession = null;
      if (msg.context_id !== state.contextId) return;
      if (utterance.continueAt !== null && !msg.cancelled) void continueElsewhere(msg);
      else onDone(msg);
      break;
    default:
      log("info", `unhandled event ${msg.type}`);
  }
}

/** The server drains: it speaks what it accepted of each open context, then closes. A
 * Play utterance with text after that continues elsewhere once this server is done. */
function onDraining(msg) {
  socketDraining = true;
  state.draining = true;
  const mine = (msg.contexts || []).find((c) => c.context_id === state.contextId);
  const speaking = state.contextState === "speaking" && mine;
  log("info", "服务器正在重启 the server is draining before a restart" +
    (speaking ? `: it speaks this utterance up to character ${mine.end_char}` : ""));
  if (!speaking || mine.ended) return; // all of it was accepted: all of it is spoken here
  if (typeSession && typeSession.contextId === state.contextId) {
    // Nothing more goes to this context; what the server did not accept stays unsent,
    // and typing goes on in a new context, on a new connection, after its `done`.
    typeSession.drained = true;
    const accepted = Array.from(typeSession.base).length + mine.end_char;
    typedSent = Array.from($("text").value).slice(0, accepted).join("");
    return;
  }
  if (utterance.chars === null) return;
  stopDeltas(); // the server takes no more text for it
  utterance.continueAt = utterance.charBase + mine.end_char;
}

/** The drained server has spoken its part (`done`: its `msg`): the rest of the utterance
 * on a new connection, with the voice, seed and speed heard so far, into the same
 * playback. */
async function continueElsewhere(msg) {
  const startChar = utterance.continueAt;
  utterance.continueAt = null;
  const rest = utterance.chars.slice(startChar);
  if (state.contextState !== "speaking") return; // stopped: nothing more to do
  if (rest.length === 0) {
    onDone(msg); // nothing left to say: the drain came just before `end`
    return;
  }
  // The drained server finished its part: all of it was heard.
  utterance.heardChars = startChar;
  utterance.openSegment = null;
  const contextId = beginLeg(startChar, { reason: "draining", startChar });
  try {
    await connect();
  } catch {
    playerEnd(); // the refusal is in the log and the alert
    return;
  }
  // Stop or another Play meanwhile.
  if (state.contextId !== contextId || state.contextState !== "speaking") return;
  log("info", `continued on a new connection from character ${startChar}`);
  sendLeg(contextId, rest, true);
}

/** The utterance's next server context (a "leg"), from `startChar` on: its numbers
 * continue the utterance's (`resumed` records where); returns its context id. */
function beginLeg(startChar, resumed) {
  const contextId = newContextId();
  state.contextId = contextId;
  state.stream = null;
  expectedSequence = 0;
  state.sent = [];
  state.resumed.push(resumed);
  utterance.charBase = startChar;
  // A segment heard again keeps its index; otherwise the numbering goes on.
  utterance.segmentBase = resumed.repeated ? resumed.index : state.segments.length;
  utterance.sampleBase = state.samplesReceived;
  if (typeSession && typeSession.legs) typeSession.contextId = contextId;
  return contextId;
}

/** `start` the leg with the voice, seed and speed heard so far, then send it `chars`
 * (as an LLM would in that mode), and `end` when the whole text is known. */
function sendLeg(contextId, chars, ended) {
  const heard = utterance.voice || utterance.startFields || {};
  send({ type: "start", context_id: contextId, ...heard });
  if (!ended) {
    if (chars.length) sendText(contextId, chars.join(""));
  } else if ($("stream-mode").checked && !typeSession) {
    sendDeltas(contextId, chars);
  } else {
    if (chars.length) sendText(contextId, chars.join(""));
    send({ type: "end", context_id: contextId });
  }
}

function resumable(code) {
  const typing = typeSession && typeSession.contextId === state.contextId;
  return (utterance.chars !== null || typing) && !CLIENT_FAULT_CLOSES.has(code);
}

/** The connection was lost mid-utterance: continue it on a new one (the balancer picks
 * the server) from the segment whose audio may have been cut, or after the last one
 * heard; tries until RESUME_ATTEMPTS or RESUME_WITHIN_MS since the first loss. */
async function resumeAfterLoss(code) {
  stopDeltas();
  utterance.continueAt = null; // a drain's continuation is this one now
  const lostContext = state.contextId;
  const open = utterance.openSegment;
  const startChar = open ? open.startChar : utterance.heardChars;
  const session = typeSession && typeSession.contextId === lostContext ? typeSession : null;
  // Play: the whole text is known. Type to speak: what this session sent so far.
  const chars = session ? sessionChars(session) : utterance.chars;
  const ended = session ? session.ended : true;
  if (session) session.legs = true;
  utterance.lostAt = utterance.lostAt ?? performance.now();
  setConnection("resuming");
  log("info", `连接中断 connection lost (${code}): continuing from character ${startChar} ` +
    "on a new connection");
  let pause = RESUME_BACKOFF_MS[0];
  let resolveResume;
  if (session) session.resuming = new Promise((resolve) => (resolveResume = resolve));
  resuming = true;
  try {
    while (utterance.resumeAttempts < RESUME_ATTEMPTS &&
           performance.now() - utterance.lostAt < RESUME_WITHIN_MS) {
      utterance.resumeAttempts += 1;
      try {
        await connect();
      } catch {
        await new Promise((resolve) => setTimeout(resolve, pause));
        pause = Math.min(2 * pause, RESUME_BACKOFF_MS[1]);
        if (state.contextId !== lostContext || state.contextState !== "speaking") return;
        continue;
      }
      if (state.contextId !== lostContext || state.contextState !== "speaking") return;
      const contextId = beginLeg(startChar, {
        reason: "closed", startChar, repeated: open !== null,
        index: open ? open.index : state.segments.length, attempts: utterance.resumeAttempts,
      });
      utterance.openSegment = null;
      log("info", `continued on a new connection from character ${startChar}` +
        (open ? ` (segment ${open.index} again)` : ""));
      if (session && !ended) {
        // What was typed meanwhile goes with it; typing then continues on this leg.
        session.drained = false;
        const heard = session.base + chars.slice(0, startChar).join("");
        const current = $("text").value;
        const typed = current.startsWith(heard);
        const rest = typed ? Array.from(current.slice(heard.length)) : chars.slice(startChar);
        sendLeg(contextId, rest, false);
        typedSent = typed ? current : session.base + chars.join("");
      } else {
        sendLeg(contextId, chars.slice(startChar), ended);
      }
      return;
    }
    if (state.contextId !== lostContext) return;
    addError({
      code: "resume_failed",
      message: `连接中断 connection lost (${code}) and no server took the rest after ` +
        `${utterance.resumeAttempts} tries: from character ${startChar} it was not spoken`,
      context_id: null,
    });
    if (session && typeSession === session) typeSession = null;
    playerEnd(); // play out what arrived
  } finally {
    resuming = false;
    if (session) {
      session.resuming = null;
      resolveResume();
    }
  }
}

/** The characters a "type to speak" session sent, in its own numbering. */
function sessionChars(session) {
  return Array.from(typedSent).slice(Array.from(session.base).length);
}

/** An error before `started`: the server refused `start`, so this context never opened. */
function onStartRefused(msg) {
  refusedContextId = msg.context_id;
  if (typeSession && typeSession.contextId === msg.context_id) typeSession = null;
  stopDeltas();
  playerClear();
  setContextState("refused");
}

function onDone(msg) {
  // The whole utterance's figures (its earlier servers' parts included).
  const audioSamples = msg.audio_samples + utterance.sampleBase;
  state.done = {
    segments: msg.segments + utterance.segmentBase,
    audioSamples,
    audioMs: (audioSamples / state.sampleRate) * 1000,
    cancelled: msg.cancelled,
    stream: msg.stream,
  };
  stopDeltas();
  const el = $("done");
  el.hidden = false;
  el.textContent =
    `服务器完成 server done: ${state.done.segments} 段 segments, ` +
    `${(state.done.audioMs / 1000).toFixed(2)} s 音频 audio (${audioSamples} samples)` +
    (msg.cancelled ? " — 已取消 cancelled" : "");
  if (msg.cancelled) {
    playerClear();
    setContextState("cancelled");
    return;
  }
  if (audioSamples !== state.samplesReceived) {
    addWarning("sample_count_mismatch",
      `done reports ${audioSamples} samples, ${state.samplesReceived} arrived`);
  }
  utterance.openSegment = null; // every segment's audio is here
  playerEnd(); // contextState becomes "done" once the worklet has played it all
  notifyFinished();
}

function onAudio(buffer) {
  let frame;
  try {
    frame = parseAudioFrame(buffer);
  } catch (err) {
    addError({ code: "bad_audio_frame", message: err.message, context_id: null });
    return;
  }
  // Audio of a context that was cancelled (or replaced) may still be in flight.
  if (frame.stream !== state.stream || state.contextState !== "speaking") return;
  if (frame.sequence !== expectedSequence) {
    state.sequenceGaps += 1;
    addWarning("sequence_gap", `expected frame ${expectedSequence}, got ${frame.sequence}`);
  }
  expectedSequence = frame.sequence + 1;
  if (state.framesReceived === 0 && firstTextAt !== null) {
    state.ttfaMs = Math.round(performance.now() - firstTextAt);
    $("ttfa").textContent = String(state.ttfaMs);
  }
  state.framesReceived += 1;
  state.samplesReceived += frame.samples.length;
  $("frames").textContent = String(state.framesReceived);
  playerPush(frame.samples);
}

// --- player reports -----------------------------------------------------------------

player.onstate = (report) => {
  if (held) return; // about the reply before, still playing out
  if (report.playedSamples > 0) $("download").disabled = false;
  if (state.contextState === "cancelled") {
    state.bufferedMs = report.bufferedMs;
    renderPlayback();
    return;
  }
  state.samplesPlayed = report.playedSamples;
  state.bufferedMs = report.bufferedMs;
  state.underruns = report.underruns;
  renderPlayback();
};

player.onreport = (report) => {
  state.worklet = {
    gen: report.gen,
    bufferedSamples: report.bufferedSamples,
    totalPlayedSamples: report.totalPlayedSamples,
    receivedAt: performance.now(),
  };
};

player.onfirstplay = () => {
  if (held || firstTextAt === null || state.ttfaPlayedMs !== null) return;
  state.ttfaPlayedMs = Math.round(performance.now() - firstTextAt);
  $("ttfa-played").textContent = String(state.ttfaPlayedMs);
};

player.ondrained = () => {
  if (held) {
    releaseHeld(); // the reply before has played out: this one's audio follows
    return;
  }
  if (state.contextState === "speaking" && (state.done || (!state.connected && !resuming))) {
    setContextState("done");
  }
};

function renderPlayback() {
  $("buffered").textContent = String(Math.round(state.bufferedMs));
  $("underruns").textContent = String(state.underruns);
  const rate = player.sampleRateHz || DEFAULT_SAMPLE_RATE_HZ;
  $("played").textContent = (state.samplesPlayed / rate).toFixed(2);
  // Highlight the segment whose audio is playing now.
  let current = -1;
  if (state.samplesPlayed > 0 && state.contextState === "speaking") {
    for (const seg of state.segments) {
      if (seg.audioStartSample <= state.samplesPlayed) current = seg.index;
    }
  }
  for (const li of $("segments").children) {
    li.classList.toggle("playing", Number(li.dataset.index) === current);
  }
}

// --- UI actions ---------------------------------------------------------------------

function setContextState(value) {
  state.contextState = value;
  const el = $("context-state");
  el.textContent = value;
  el.dataset.state = value;
  document.body.dataset.contextState = value;
  notifyFinished();
}

function resetUtterance(contextId) {
  state.contextId = contextId;
  state.stream = null;
  state.voice = null;
  state.seed = null;
  state.speed = null;
  state.framesReceived = 0;
  state.samplesReceived = 0;
  state.samplesPlayed = 0;
  state.bufferedMs = 0;
  state.underruns = 0;
  state.sequenceGaps = 0;
  state.ttfaMs = null;
  state.ttfaPlayedMs = null;
  state.segments = [];
  state.done = null;
  state.sent = [];
  state.resumed = [];
  utterance = newUtterance();
  expectedSequence = 0;
  firstTextAt = null;
  $("segments").replaceChildren();
  $("done").hidden = true;
  $("ttfa").textContent = "—";
  $("ttfa-played").textContent = "—";
  $("frames").textContent = "0";
  $("download").disabled = true; // until this utterance has played something
  renderPlayback();
}

function newContextId() {
  contextCounter += 1;
  return `web-${Date.now().toString(36)}-${contextCounter}`;
}

/** The picker's voice; the seed box: digits are a seed, anything else a raw speaker
 * string of the engine (which then replaces the picker's voice). */
function voiceFields() {
  const fields = {};
  const picked = $("voice").value;
  if (picked) fields.voice = picked;
  const raw = $("seed").value.trim();
  if (/^\d+$/.test(raw)) fields.seed = Number(raw);
  else if (raw) fields.voice = raw;
  return fields;
}

function numberInput(id, fallback) {
  const value = Number($(id).value);
  return Number.isFinite(value) ? value : fallback;
}

/** Start a context: open the audio path (inside the click), connect, send `start`. */
async function openContext({ queued = false } = {}) {
  // Created inside the user gesture so the browser lets it play.
  player.setPrebufferMs(numberInput("prebuffer-ms", 100));
  player.open(state.sampleRate || DEFAULT_SAMPLE_RATE_HZ);
  // Queued (type to speak): after the reply before it, whose audio may still be playing.
  if (queued) await serverFinished();
  const tail = queued && state.contextState === "speaking" && state.done && !state.done.cancelled;
  if (state.contextState === "speaking" && !tail) cancelCurrent();
  const contextId = newContextId();
  resetUtterance(contextId);
  setContextState("speaking");
  held = tail ? { frames: [], ended: false } : null;
  let ws;
  try {
    ws = await connect();
  } catch {
    if (state.contextId === contextId) setContextState("idle");
    return null;
  }
  if (state.contextId !== contextId) return null; // Stop or another Play meanwhile
  await player.open(state.sampleRate);
  if (!held) player.begin();
  utterance.startFields = { speed: Number($("speed").value), ...voiceFields() };
  send({ type: "start", context_id: contextId, ...utterance.startFields });
  return ws;
}

/** Resolves once the current context gets no more audio from the server (its `done`, or
 * it ended otherwise); at once when there is none. */
function serverFinished() {
  if (state.contextState !== "speaking" || state.done) return Promise.resolve();
  return new Promise((resolve) => finishWaiters.push(resolve));
}

function notifyFinished() {
  if (state.contextState !== "speaking" || state.done) {
    for (const resolve of finishWaiters.splice(0)) resolve();
  }
}

// Playback through `held` while the reply before plays out: a queued context's audio
// waits here until the player has drained the previous reply, then starts after it.
function playerPush(samples) {
  if (held) held.frames.push(samples);
  else player.push(samples);
}

function playerEnd() {
  if (held) held.ended = true;
  else player.end();
}

function playerClear() {
  held = null;
  player.clear();
}

/** The previous reply has played out: the held context's audio starts now. */
function releaseHeld() {
  const { frames, ended } = held;
  held = null;
  player.begin();
  for (const samples of frames) player.push(samples);
  if (ended) player.end();
}

async function play() {
  if (typeSession && !typeSession.ended) {
    // In "type to speak", Play finishes what was typed (after the text still queued);
    // what is typed next goes to a new context, spoken after this one.
    const session = typeSession;
    session.ended = true;
    session.chain = session.chain.then(() => {
      if (session.contextId) send({ type: "end", context_id: session.contextId });
    });
    return;
  }
  if (typeSession) return; // ended: still being spoken
  const text = $("text").value;
  if (!text.trim()) return;
  const ws = await openContext();
  if (!ws) return;
  const contextId = state.contextId;
  utterance.chars = Array.from(text); // code points, as the server counts characters
  if ($("stream-mode").checked) {
    sendDeltas(contextId, utterance.chars); // code points: never split a surrogate pair
  } else {
    sendText(contextId, text);
    send({ type: "end", context_id: contextId });
  }
}

function sendText(contextId, text) {
  if (firstTextAt === null) firstTextAt = performance.now();
  send({ type: "text", context_id: contextId, text });
}

function randomInt(lo, hi) {
  if (hi < lo) [lo, hi] = [hi, lo];
  return lo + Math.floor(Math.random() * (hi - lo + 1));
}

/** Send `chars` in small timed deltas, as an LLM streams tokens, then `end`. */
function sendDeltas(contextId, chars) {
  const minChars = Math.max(1, numberInput("delta-min-chars", 1));
  const maxChars = Math.max(1, numberInput("delta-max-chars", 4));
  const minMs = Math.max(0, numberInput("delta-min-ms", 30));
  const maxMs = Math.max(0, numberInput("delta-max-ms", 60));
  let pos = 0;
  const step = () => {
    deltaTimer = null;
    if (state.contextId !== contextId || state.contextState !== "speaking") return;
    const n = randomInt(minChars, maxChars);
    sendText(contextId, chars.slice(pos, pos + n).join(""));
    pos += n;
    if (pos < chars.length) deltaTimer = setTimeout(step, randomInt(minMs, maxMs));
    else send({ type: "end", context_id: contextId });
  };
  step();
}

function stopDeltas() {
  if (deltaTimer !== null) clearTimeout(deltaTimer);
  deltaTimer = null;
}

/** Cancel the current context on the server and silence playback at once. */
function cancelCurrent() {
  stopDeltas();
  utterance.continueAt = null; // a drained utterance is not continued either
  // A context whose `start` never went out (still connecting) has nothing to cancel.
  if (state.contextId && !state.done && state.sent.includes("start")) {
    send({ type: "cancel", context_id: state.contextId });
  }
  playerClear();
  state.bufferedMs = 0;
  setContextState("cancelled");
  renderPlayback();
}

function stop() {
  if (typeSession) {
    typeSession = null;
    typedSent = $("text").value; // what was typed so far is not spoken later
  }
  if (state.contextState === "speaking") cancelCurrent();
  else playerClear();
}

// --- type to speak ------------------------------------------------------------------

// The prefix of the box already sent, over all "type to speak" contexts: a new context
// (after `done` or Stop) speaks only what is typed after it.
let typedSent = "";

/** Text typed since the last delta is sent as it is typed; Enter also flushes. */
function onTyped(event) {
  if (!$("type-mode").checked || event.isComposing) return; // wait for the IME to commit
  // Its server drained: the text waits in the box for the next context, after `done`.
  if (typeSession && typeSession.drained) return;
  const enter = event.inputType === "insertLineBreak" || event.inputType === "insertParagraph";
  if (!typeSession || typeSession.ended) {
    // base: what was sent before this context (its text starts after it). A context
    // after a reply is queued: that reply's audio plays to its end first.
    const session = {
      contextId: null, chain: null, base: typedSent, drained: false, ended: false,
      legs: false, resuming: null,
    };
    typeSession = session;
    session.chain = openContext({ queued: true }).then((ws) => {
      if (ws) session.contextId = state.contextId;
      else if (typeSession === session) typeSession = null;
    });
  }
  const session = typeSession;
  session.chain = session.chain.then(async () => {
    if (session.resuming) await session.resuming; // a lost connection, continued
    if (!session.contextId || session.contextId !== state.contextId || session.drained) return;
    const current = $("text").value;
    if (current.startsWith(typedSent)) {
      const delta = current.slice(typedSent.length);
      if (delta) sendText(session.contextId, delta);
    } else {
      // Text already sent cannot be taken back: only what is typed after it is spoken.
      log("info", "编辑已发送的文本不会重读 edits to sent text are not re-spoken");
    }
    typedSent = current;
    if (enter) send({ type: "flush", context_id: session.contextId });
  });
}

// --- around the socket: voices, readiness, refusals, download ------------------------

/** Fill the picker from GET /v1/voices (sent with the token). */
async function loadVoices() {
  const token = $("token").value.trim();
  const result = await fetchVoices(token);
  if ($("token").value.trim() !== token) return; // the token changed meanwhile
  if (!result.ok) {
    state.voices = null;
    showAlert(result);
    return;
  }
  if (state.alert && state.alert.status === 401) showAlert(null);
  state.voices = result.voices.map((voice) => voice.name);
  renderVoices($("voice"), result.voices, result.engine);
}

let readinessPoll = null;
let readinessUnreachable = false; // GET /ready got no answer

/** The banner from GET /ready: a degraded server, random weights (or nothing). */
async function refreshReadiness() {
  clearTimeout(readinessPoll);
  const readiness = await fetchReadiness();
  state.readiness = readiness;
  readinessUnreachable = readiness === null;
  if (readiness && readiness.engine && !state.connected) {
    // Before any connection: the engine the server serves, from GET /ready.
    state.engine = readiness.engine;
    $("engine").textContent = readiness.engine;
  }
  renderStatus();
  const lines = readinessWarnings(readiness);
  state.banner = lines.map((line) => line.kind);
  renderBanner($("banner"), lines);
  // A model still loading may come up degraded: look again until it has settled.
  if (readiness && readiness.state === "loading") {
    readinessPoll = setTimeout(refreshReadiness, READY_POLL_MS);
  }
}

/** Show a refusal ({status, code, message}: 401, 503, ...) above the log, or hide it. */
function showAlert(problem) {
  state.alert = problem
    ? { status: problem.status, code: problem.code, message: problem.message }
    : null;
  renderAlert($("alert"), problem);
}

/** Save what the player played of the current utterance (so far) as a WAV file. */
async function download() {
  const { samples, truncated, sampleRateHz } = await player.takeRecording();
  if (samples.length === 0) return;
  if (truncated) {
    addWarning("recording_truncated", "the download holds the recording's first minutes only");
  }
  const name = `tts-${state.contextId || "audio"}.wav`;
  saveFile(encodeWav(samples, sampleRateHz), name);
  log("info", `download: ${name}, ${(samples.length / sampleRateHz).toFixed(2)} s`);
}

// --- log ----------------------------------------------------------------------------

function addError(err) {
  state.errors.push(err);
  log("error", `${err.code}: ${err.message}`);
}

function log(level, text) {
  appendLog($("log"), level, text, MAX_LOG_ENTRIES);
}

function addWarning(code, message) {
  state.warnings.push({ code, message, context_id: state.contextId });
  log("warning", `${code}: ${message}`);
}

// --- wiring -------------------------------------------------------------------------

function init() {
  const token = $("token");
  token.value = localStorage.getItem(TOKEN_STORAGE_KEY) || "";
  token.addEventListener("change", () => {
    localStorage.setItem(TOKEN_STORAGE_KEY, token.value.trim());
    void loadVoices();
  });
  const speed = $("speed");
  speed.addEventListener("input", () => {
    $("speed-value").textContent = Number(speed.value).toFixed(2);
  });
  $("prebuffer-ms").addEventListener("change", () => {
    player.setPrebufferMs(numberInput("prebuffer-ms", 100));
  });
  $("play").addEventListener("click", () => void play());
  $("stop").addEventListener("click", stop);
  $("download").addEventListener("click", () => void download());
  const text = $("text");
  text.addEventListener("input", onTyped);
  text.addEventListener("compositionend", onTyped);
  $("type-mode").addEventListener("change", (event) => {
    if (!event.target.checked && typeSession) {
      if (typeSession.contextId) send({ type: "end", context_id: typeSession.contextId });
      typeSession = null;
    }
    if (event.target.checked) {
      // Typing starts from an empty box: everything typed from here on is spoken.
      text.value = "";
      typedSent = "";
      text.focus();
    }
  });
  setContextState("idle");
  void loadVoices();
  void refreshReadiness();
  document.body.dataset.ready = "1";
}

init();
