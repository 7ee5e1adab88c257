// The page: one WebSocket to /v1/stream (protocol v1, docs/protocol.md), one player.
//
// `window.ttsState` is a read-only snapshot for tests and the curious. `contextState`
// is "idle" before the first Play, "speaking" from Play until the server's `done` AND
// the player has played everything out, then "done"; "cancelled" after Stop (or a
// `done` with cancelled: true).

import { Player, parseAudioFrame } from "/web/player.js";

const SUBPROTOCOL = "tts.v1";
const TOKEN_PREFIX = "token.";
const TOKEN_STORAGE_KEY = "tts.token";
const DEFAULT_SAMPLE_RATE_HZ = 24000;
const MAX_LOG_ENTRIES = 200;

const $ = (id) => document.getElementById(id);

const state = {
  connected: false,
  connection: "disconnected", // disconnected | connecting | connected | closed | refused
  sessionId: null,
  engine: null,
  sampleRate: null,
  limits: null,
  contextId: null,
  stream: null,
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
let deltaTimer = null; // pending timed delta of the "stream as an LLM" mode
let firstTextAt = null; // performance.now() of the first text sent in this context
let expectedSequence = 0;
let contextCounter = 0;
let typeSession = null; // {contextId, chain} while a "type to speak" context is open

// --- connection ---------------------------------------------------------------------

function socketUrl() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}/v1/stream`;
}

/** The connection, opened (or reused) with the current token; resolves on `ready`. */
function connect() {
  const token = $("token").value.trim();
  if (socket && socketToken === token && socket.readyState <= WebSocket.OPEN) return socketReady;
  if (socket) socket.close(1000);
  const protocols = token ? [SUBPROTOCOL, TOKEN_PREFIX + token] : [SUBPROTOCOL];
  const ws = new WebSocket(socketUrl(), protocols);
  ws.binaryType = "arraybuffer";
  socket = ws;
  socketToken = token;
  setConnection("connecting");
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
      if (!opened) {
        setConnection("refused");
        explainRefusal(token).then((err) => {
          addError(err);
          reject(new Error(err.message));
        });
        return;
      }
      setConnection("closed", event.code);
      if (event.code !== 1000 && event.code !== 1005) {
        addError({
          code: `close_${event.code}`,
          message: `连接已断开 connection closed: ${event.code} ${event.reason || ""}`.trim(),
          context_id: null,
        });
      }
      if (state.contextState === "speaking") {
        player.end(); // play out what arrived; no more will come
      }
      if (!ready) reject(new Error(`connection closed (${event.code}) before ready`));
    };
  });
  socketReady.catch(() => {}); // rejections are reported in the log, not as unhandled
  return socketReady;
}

/**
 * Why was the upgrade refused? The browser hides the HTTP status, so ask /ready: the
 * protocol refuses with 503 while the engine is not ready or the server is full, and
 * with 401 when the token is wrong or missing.
 */
async function explainRefusal(token) {
  let readiness = null;
  try {
    const response = await fetch("/ready", { cache: "no-store" });
    readiness = await response.json();
  } catch {
    return {
      code: "connection_failed",
      message: "无法连接服务器 cannot reach the server",
      context_id: null,
    };
  }
  if (readiness && readiness.ready === false) {
    return {
      code: "not_ready",
      message: `引擎未就绪 engine not ready (${readiness.state || "loading"})`,
      context_id: null,
    };
  }
  const why = token
    ? "令牌错误 wrong token"
    : "缺少令牌 this server requires a token";
  return {
    code: "unauthorized",
    message: `连接被拒绝 connection refused (HTTP 401 unauthorized): ${why} — or the server is full (503)`,
    context_id: null,
  };
}

function setConnection(connection, code) {
  state.connection = connection;
  const el = $("status");
  el.dataset.state = connection;
  el.textContent = {
    disconnected: "未连接 disconnected",
    connecting: "连接中 connecting…",
    connected: "已连接 connected",
    closed: `已断开 closed${code ? ` (${code})` : ""}`,
    refused: "被拒绝 refused",
  }[connection];
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
  log("info", `ready: session ${msg.session_id}, ${msg.engine}, ${msg.sample_rate} Hz`);
}

function onEvent(msg) {
  switch (msg.type) {
    case "started":
      if (msg.context_id !== state.contextId) return;
      state.stream = msg.stream;
      state.seed = msg.seed;
      state.speed = msg.speed;
      if (msg.sample_rate !== player.sampleRateHz) {
        // Only reached if the page asked for another rate; the AudioContext must match.
        player.open(msg.sample_rate);
        player.begin();
      }
      log("info", `started: stream ${msg.stream}, seed ${msg.seed}, speed ${msg.speed}`);
      break;
    case "segment":
      if (msg.context_id !== state.contextId) return;
      state.segments.push({
        index: msg.index,
        text: msg.text,
        spoken: msg.spoken,
        startChar: msg.start_char,
        endChar: msg.end_char,
        audioStartSample: msg.audio_start_sample,
        audioStartMs: msg.audio_start_ms,
      });
      renderSegment(msg);
      break;
    case "warning":
      state.warnings.push({ code: msg.code, message: msg.message, context_id: msg.context_id });
      log("warning", `${msg.code}: ${msg.message}`);
      break;
    case "error":
      addError({ code: msg.code, message: msg.message, context_id: msg.context_id });
      break;
    case "done":
      if (msg.context_id === (typeSession && typeSession.contextId)) typeSession = null;
      if (msg.context_id !== state.contextId) return;
      onDone(msg);
      break;
    default:
      log("info", `unhandled event ${msg.type}`);
  }
}

function onDone(msg) {
  state.done = {
    segments: msg.segments,
    audioSamples: msg.audio_samples,
    audioMs: msg.audio_ms,
    cancelled: msg.cancelled,
    stream: msg.stream,
  };
  stopDeltas();
  const el = $("done");
  el.hidden = false;
  el.textContent =
    `服务器完成 server done: ${msg.segments} 段 segments, ${(msg.audio_ms / 1000).toFixed(2)} s 音频 audio` +
    ` (${msg.audio_samples} samples)` +
    (msg.cancelled ? " — 已取消 cancelled" : "");
  if (msg.cancelled) {
    player.clear();
    setContextState("cancelled");
    return;
  }
  if (msg.audio_samples !== state.samplesReceived) {
    addWarning("sample_count_mismatch",
      `done reports ${msg.audio_samples} samples, ${state.samplesReceived} arrived`);
  }
  player.end(); // contextState becomes "done" once the worklet has played it all
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
  player.push(frame.samples);
}

// --- player reports -----------------------------------------------------------------

player.onstate = (report) => {
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
  if (firstTextAt === null || state.ttfaPlayedMs !== null) return;
  state.ttfaPlayedMs = Math.round(performance.now() - firstTextAt);
  $("ttfa-played").textContent = String(state.ttfaPlayedMs);
};

player.ondrained = () => {
  if (state.contextState === "speaking" && (state.done || !state.connected)) {
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
}

function resetUtterance(contextId) {
  state.contextId = contextId;
  state.stream = null;
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
  expectedSequence = 0;
  firstTextAt = null;
  $("segments").replaceChildren();
  $("done").hidden = true;
  $("ttfa").textContent = "—";
  $("ttfa-played").textContent = "—";
  $("frames").textContent = "0";
  renderPlayback();
}

function newContextId() {
  contextCounter += 1;
  return `web-${Date.now().toString(36)}-${contextCounter}`;
}

/** Voice/seed box: digits are a seed, anything else an engine speaker string. */
function voiceFields() {
  const raw = $("seed").value.trim();
  if (!raw) return {};
  if (/^\d+$/.test(raw)) return { seed: Number(raw) };
  return { voice: raw };
}

function numberInput(id, fallback) {
  const value = Number($(id).value);
  return Number.isFinite(value) ? value : fallback;
}

/** Start a context: open the audio path (inside the click), connect, send `start`. */
async function openContext() {
  // Created inside the user gesture so the browser lets it play.
  player.setPrebufferMs(numberInput("prebuffer-ms", 100));
  player.open(state.sampleRate || DEFAULT_SAMPLE_RATE_HZ);
  if (state.contextState === "speaking") cancelCurrent();
  const contextId = newContextId();
  resetUtterance(contextId);
  setContextState("speaking");
  let ws;
  try {
    ws = await connect();
  } catch {
    if (state.contextId === contextId) setContextState("idle");
    return null;
  }
  if (state.contextId !== contextId) return null; // Stop or another Play meanwhile
  await player.open(state.sampleRate);
  player.begin();
  send({
    type: "start",
    context_id: contextId,
    speed: Number($("speed").value),
    ...voiceFields(),
  });
  return ws;
}

async function play() {
  if (typeSession) {
    // In "type to speak", Play finishes what was typed.
    send({ type: "end", context_id: typeSession.contextId });
    return;
  }
  const text = $("text").value;
  if (!text.trim()) return;
  const ws = await openContext();
  if (!ws) return;
  const contextId = state.contextId;
  if ($("stream-mode").checked) {
    sendDeltas(contextId, Array.from(text)); // code points: never split a surrogate pair
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
  // A context whose `start` never went out (still connecting) has nothing to cancel.
  if (state.contextId && !state.done && state.sent.includes("start")) {
    send({ type: "cancel", context_id: state.contextId });
  }
  player.clear();
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
  else player.clear();
}

// --- type to speak ------------------------------------------------------------------

// The prefix of the box already sent, over all "type to speak" contexts: a new context
// (after `done` or Stop) speaks only what is typed after it.
let typedSent = "";

/** Text typed since the last delta is sent as it is typed; Enter also flushes. */
function onTyped(event) {
  if (!$("type-mode").checked || event.isComposing) return; // wait for the IME to commit
  const enter = event.inputType === "insertLineBreak" || event.inputType === "insertParagraph";
  if (!typeSession) {
    const session = { contextId: null, chain: null };
    typeSession = session;
    session.chain = openContext().then((ws) => {
      if (ws) session.contextId = state.contextId;
      else if (typeSession === session) typeSession = null;
    });
  }
  const session = typeSession;
  session.chain = session.chain.then(() => {
    if (!session.contextId || session.contextId !== state.contextId) return;
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

// --- log ----------------------------------------------------------------------------

function addError(err) {
  state.errors.push(err);
  log("error", `${err.code}: ${err.message}`);
}

function addWarning(code, message) {
  state.warnings.push({ code, message, context_id: state.contextId });
  log("warning", `${code}: ${message}`);
}

function log(level, text) {
  const li = document.createElement("li");
  li.className = level;
  const time = new Date().toLocaleTimeString("zh-CN", { hour12: false });
  li.textContent = `${time} ${text}`;
  const list = $("log");
  list.prepend(li);
  while (list.children.length > MAX_LOG_ENTRIES) list.lastChild.remove();
  if (level !== "info") console[level === "error" ? "error" : "warn"](text);
}

function renderSegment(msg) {
  const li = document.createElement("li");
  li.dataset.index = String(msg.index);
  li.classList.add("arrived");
  if (!msg.spoken || !msg.spoken.trim()) {
    li.classList.add("silent");
    li.textContent = `${JSON.stringify(msg.text)} （无可朗读内容 nothing to speak）`;
  } else {
    li.textContent = msg.spoken !== msg.text ? `${msg.text} → ${msg.spoken}` : msg.text;
  }
  li.title = `chars ${msg.start_char}–${msg.end_char}, audio at ${msg.audio_start_ms} ms`;
  const list = $("segments");
  for (const old of list.querySelectorAll(".latest")) old.classList.remove("latest");
  li.classList.add("latest");
  list.append(li);
}

// --- wiring -------------------------------------------------------------------------

function init() {
  const token = $("token");
  token.value = localStorage.getItem(TOKEN_STORAGE_KEY) || "";
  token.addEventListener("change", () => {
    localStorage.setItem(TOKEN_STORAGE_KEY, token.value.trim());
  });
  const speed = $("speed");
  speed.addEventListener("input", () => {
    $("speed-value").textContent = Number(speed.value).toFixed(1);
  });
  $("prebuffer-ms").addEventListener("change", () => {
    player.setPrebufferMs(numberInput("prebuffer-ms", 100));
  });
  $("play").addEventListener("click", () => void play());
  $("stop").addEventListener("click", stop);
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
  document.body.dataset.ready = "1";
}

init();
