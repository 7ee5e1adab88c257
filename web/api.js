// What the page asks the server over HTTP (docs/http-api.md): its named voices, its
// readiness, and why a WebSocket upgrade was refused. Every answer is turned into plain
// data: {ok: true, ...} or a problem {status, code, message} to show the user.

const authHeaders = (token) => (token ? { Authorization: `Bearer ${token}` } : {});

async function get(path, token) {
  try {
    return await fetch(path, { headers: authHeaders(token), cache: "no-store" });
  } catch {
    return null; // the server cannot be reached
  }
}

const UNREACHABLE = {
  status: 0,
  code: "connection_failed",
  message: "无法连接服务器 cannot reach the server",
};

/** The server's error body ({"error": {code, message, retry_after_ms}}), or a stand-in. */
async function errorBody(response) {
  try {
    const body = await response.json();
    if (body && body.error) return body.error;
  } catch {
    // not JSON: a proxy's page, say
  }
  return { code: `http_${response.status}`, message: response.statusText };
}

const MESSAGES_503 = {
  too_many_connections:
    "服务器已满 server full (HTTP 503): it holds its maximum number of connections; " +
    "try again shortly",
  busy: "服务器繁忙 server busy (503): every voice it can keep in real time is speaking",
  not_ready: "引擎未就绪 engine not ready (HTTP 503)",
  draining: "服务器正在关闭 server shutting down (HTTP 503): it is draining before a restart",
};

/** The user's problem for an HTTP 401 or 503 (or another error) with its error body. */
export function describeRefusal(status, error, token) {
  const code = error.code || `http_${status}`;
  const said = error.message ? `: ${error.message}` : "";
  if (status === 401) {
    const message = token
      ? "令牌无效 wrong token (HTTP 401): the server refused this token; check the token field"
      : "需要令牌 token required (HTTP 401): this server needs a token; enter it in the " +
        "token field";
    return { status, code, message };
  }
  if (status === 503) {
    let message = MESSAGES_503[code] || "服务不可用 service unavailable (HTTP 503)";
    if (code === "not_ready" || !MESSAGES_503[code]) message += said;
    if (error.retry_after_ms) message += `; retry in ${Math.ceil(error.retry_after_ms / 1000)} s`;
    return { status, code, message };
  }
  return { status, code, message: `HTTP ${status}${said}` };
}

/**
 * The server's voices for the main engine, presets first:
 * {ok: true, engine, voices: [{name, description, preset, source}]}, or a problem.
 */
export async function fetchVoices(token) {
  const response = await get("/v1/voices", token);
  if (!response) return { ok: false, ...UNREACHABLE };
  if (!response.ok) {
    return { ok: false, ...describeRefusal(response.status, await errorBody(response), token) };
  }
  const body = await response.json();
  const voices = body.data.map((v) => ({
    name: v.name,
    description: v.description || "",
    preset: Boolean(v.preset),
    source: v.source,
  }));
  return { ok: true, engine: body.engine, voices };
}

/** GET /ready's body (whatever its status: 503 while loading has the same shape), or null. */
export async function fetchReadiness() {
  const response = await get("/ready");
  if (!response) return null;
  try {
    return await response.json();
  } catch {
    return null;
  }
}

/**
 * Why was the upgrade refused? The browser hides the HTTP status and body of a refused
 * WebSocket upgrade, so ask as the server decides (docs/protocol.md): the token first
 * (an authenticated route answers 401 to the same token), then readiness (not_ready,
 * draining); a server that takes the token and is ready refused for its connection limit.
 */
export async function explainRefusal(token) {
  const probe = await get("/v1/voices", token);
  if (!probe) return UNREACHABLE;
  if (probe.status === 401) return describeRefusal(401, await errorBody(probe), token);
  const readiness = await fetchReadiness();
  if (!readiness) return UNREACHABLE;
  if (readiness.state === "draining") return describeRefusal(503, { code: "draining" }, token);
  if (readiness.ready === false) {
    const detail = [readiness.state, readiness.detail].filter(Boolean).join(": ");
    return describeRefusal(503, { code: "not_ready", message: detail || "loading" }, token);
  }
  return describeRefusal(503, { code: "too_many_connections" }, token);
}

/** The engine /ready names when the fallback voice serves. */
const FALLBACK_ENGINE = "espeak";

/** The banner's lines for a /ready body: degraded service, the fallback voice serving as
 * configured (no model), random weights; [] if none. */
export function readinessWarnings(readiness) {
  const lines = [];
  if (!readiness) return lines;
  if (readiness.degraded) {
    const engine = readiness.engine || "the fallback voice";
    const detail = readiness.detail ? ` (${readiness.detail})` : "";
    lines.push({
      kind: "degraded",
      text: `降级运行 degraded: ${engine} is speaking instead of the model${detail}`,
    });
  }
  if (readiness.engine === FALLBACK_ENGINE && !readiness.degraded) {
    lines.push({
      kind: "fallback-voice",
      text:
        "后备语音 fallback voice: no ChatTTS model is loaded, so espeak-ng's robotic " +
        "Mandarin voice speaks. For ChatTTS, get its weights and restart the server with " +
        "them: " +
        "`.venv/bin/chattts-stream download-weights models/chattts`, then " +
        '`make serve ARGS="--model-dir models/chattts"` (README.md, "Quickstart (CPU)")',
    });
  }
  if (readiness.random_weights) {
    lines.push({
      kind: "random-weights",
      text:
        "随机权重 random weights: the model's checkpoint has random weights (a test " +
        "checkpoint), so what it says is noise",
    });
  }
  return lines;
}
