// Main-thread side of the player: owns the AudioContext and the worklet node, turns
// protocol audio frames into Float32 samples and posts them to the worklet.

export const AUDIO_HEADER_BYTES = 12;
const NOTHING_RECORDED = { samples: new Float32Array(0), truncated: false };

/**
 * Split one binary audio frame: 12-byte header (stream, segment, sequence: uint32 LE)
 * then int16 LE mono PCM. Returns {stream, segment, sequence, samples: Float32Array}.
 * Throws on a frame that is too short or has an odd PCM byte count.
 */
export function parseAudioFrame(buffer) {
  if (buffer.byteLength < AUDIO_HEADER_BYTES) {
    throw new Error(`audio frame of ${buffer.byteLength} bytes is shorter than its header`);
  }
  const pcmBytes = buffer.byteLength - AUDIO_HEADER_BYTES;
  if (pcmBytes % 2 !== 0) throw new Error(`audio frame has an odd PCM length (${pcmBytes})`);
  const view = new DataView(buffer);
  const n = pcmBytes / 2;
  const samples = new Float32Array(n);
  // DataView keeps this right on any host byte order; the header's 12 bytes keep the
  // PCM 2-byte aligned, but the wire is little-endian by definition.
  for (let i = 0; i < n; i++) samples[i] = view.getInt16(AUDIO_HEADER_BYTES + 2 * i, true) / 32768;
  return {
    stream: view.getUint32(0, true),
    segment: view.getUint32(4, true),
    sequence: view.getUint32(8, true),
    samples,
  };
}

/**
 * Plays a sequence of streams through the "pcm-player" worklet.
 *
 * Call `open(sampleRateHz)` inside a user gesture (it creates / resumes the
 * AudioContext), `begin()` for each new stream, `push()` its samples, `end()` when the
 * server said `done`, and `clear()` to silence it at once. `onstate`, `onfirstplay` and
 * `ondrained` report what the worklet did for the current stream only; `onreport` gets
 * every state report, for diagnostics. `takeRecording()` gives what was played since the
 * last `begin()`: the samples the audio output got, not those that merely arrived.
 */
export class Player {
  constructor({ prebufferMs = 100 } = {}) {
    this.prebufferMs = prebufferMs;
    this.context = null;
    this.node = null;
    this.ready = null; // Promise resolved once the worklet node exists
    this.gen = 0;
    this.takes = new Map(); // record-take id -> resolve
    this.takeCounter = 0;
    this.onreport = () => {}; // every worklet state report, whatever its stream
    this.onstate = () => {};
    this.onfirstplay = () => {};
    this.ondrained = () => {};
  }

  get sampleRateHz() {
    return this.context ? this.context.sampleRate : null;
  }

  /** Create (or reuse) an AudioContext at exactly `sampleRateHz`, and resume it. */
  open(sampleRateHz) {
    if (this.context && this.context.sampleRate === sampleRateHz) {
      if (this.context.state === "suspended") this.context.resume();
      return this.ready;
    }
    if (this.context) this.context.close();
    this.dropTakes(); // the old worklet, and its recording, are gone
    const context = new AudioContext({ sampleRate: sampleRateHz, latencyHint: "interactive" });
    this.context = context;
    this.node = null;
    this.ready = context.audioWorklet.addModule("/web/player-worklet.js").then(() => {
      if (this.context !== context) return; // replaced meanwhile
      const node = new AudioWorkletNode(context, "pcm-player", {
        numberOfInputs: 0,
        numberOfOutputs: 1,
        outputChannelCount: [1],
      });
      node.port.onmessage = (event) => this.onMessage(event.data);
      node.connect(context.destination);
      this.node = node;
      node.port.postMessage({ type: "config", prebufferMs: this.prebufferMs });
      node.port.postMessage({ type: "clear", gen: this.gen });
    });
    context.resume();
    return this.ready;
  }

  setPrebufferMs(ms) {
    this.prebufferMs = ms;
    this.post({ type: "config", prebufferMs: ms });
  }

  /** Start a new stream: anything still queued from the previous one is dropped, and a
   * new recording starts. */
  begin() {
    this.clear();
    this.post({ type: "record-reset" });
  }

  /** Resolves to {samples: Float32Array, truncated, sampleRateHz}: every sample played
   * since the last begin() (empty before the worklet exists). */
  takeRecording() {
    const sampleRateHz = this.sampleRateHz;
    const result = (msg) => ({ samples: msg.samples, truncated: msg.truncated, sampleRateHz });
    if (!this.node) return Promise.resolve(result(NOTHING_RECORDED));
    this.takeCounter += 1;
    const id = this.takeCounter;
    return new Promise((resolve) => {
      this.takes.set(id, (msg) => resolve(result(msg)));
      this.node.port.postMessage({ type: "record-take", id });
    });
  }

  dropTakes() {
    for (const resolve of this.takes.values()) resolve(NOTHING_RECORDED);
    this.takes.clear();
  }

  push(samples) {
    const gen = this.gen;
    if (this.node) {
      this.node.port.postMessage({ type: "push", gen, samples }, [samples.buffer]);
    } else if (this.ready) {
      this.ready.then(() => this.pushWhenReady(gen, samples));
    }
  }

  pushWhenReady(gen, samples) {
    if (gen !== this.gen || !this.node) return;
    this.node.port.postMessage({ type: "push", gen, samples }, [samples.buffer]);
  }

  /** The stream has no more audio: play out what is queued, even below the prebuffer. */
  end() {
    const gen = this.gen;
    if (this.node) this.post({ type: "end", gen });
    else if (this.ready) this.ready.then(() => gen === this.gen && this.post({ type: "end", gen }));
  }

  /** Silence now: drop everything queued in the worklet. */
  clear() {
    this.gen += 1;
    this.post({ type: "clear", gen: this.gen });
  }

  post(msg) {
    if (this.node) this.node.port.postMessage(msg);
  }

  onMessage(msg) {
    if (msg.type === "recording") {
      const resolve = this.takes.get(msg.id);
      this.takes.delete(msg.id);
      if (resolve) resolve(msg);
      return;
    }
    if (msg.type === "state") this.onreport(msg);
    if (msg.gen !== this.gen) return; // about a stream that was cleared
    if (msg.type === "state") this.onstate(msg);
    else if (msg.type === "first-play") this.onfirstplay(msg);
    else if (msg.type === "drained") this.ondrained(msg);
  }
}
