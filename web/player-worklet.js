// AudioWorklet side of the player: a jitter buffer that plays mono Float32 PCM.
//
// Messages in (port):
//   {type: "push", gen, samples: Float32Array}   append audio (transferred, not copied)
//   {type: "end", gen}                           no more audio for this stream: play out
//                                                what is left even below the prebuffer
//   {type: "clear", gen}                         drop everything now (Stop / barge-in)
//   {type: "config", prebufferMs}                prebuffer for the next (re)start
//   {type: "record-reset"}                       start a new recording (a new utterance)
//   {type: "record-take", id}                    send the recording so far
// Messages out:
//   {type: "state", gen, bufferedSamples, bufferedMs, playedSamples, underruns,
//    playing, ended, drained, totalPlayedSamples}
//                                                every ~50 ms while something changes,
//                                                and every 250 ms regardless
//   {type: "first-play", gen}                    the first sample of a stream is output
//   {type: "drained", gen}                       ended and everything was played
//   {type: "recording", id, samples, truncated}  every sample output since the last
//                                                "record-reset", as played (ramps
//                                                included), whatever the generation
//
// `gen` is the main thread's stream generation: a "clear" starts a new generation, so
// reports about audio that was already dropped can be told apart and ignored.

const REPORT_INTERVAL_S = 0.05;
const HEARTBEAT_INTERVAL_S = 0.25;
// A short ramp when playback (re)starts and when it runs dry mid-stream, so an underrun
// is a soft gap rather than a click. 2 ms at 24 kHz.
const RAMP_SAMPLES = 48;
// The recording keeps at most this much output (10 minutes: 58 MB at 24 kHz).
const MAX_RECORD_S = 600;

class PcmPlayer extends AudioWorkletProcessor {
  constructor() {
    super();
    // Ring buffer, grown by doubling when a burst does not fit: a TTS server usually
    // produces faster than real time, so a whole utterance may be queued at once.
    this.ring = new Float32Array(sampleRate * 10);
    this.readIndex = 0;
    this.count = 0;
    this.prebufferSamples = Math.round(sampleRate * 0.1);
    this.gen = 0;
    // Samples output over the node's life, across streams: proof that "clear" silences.
    this.totalPlayedSamples = 0;
    this.resetStream();
    this.resetRecording();
    this.lastReport = 0;
    this.dirty = true;
    this.port.onmessage = (event) => this.onMessage(event.data);
  }

  resetStream() {
    this.readIndex = 0;
    this.count = 0;
    this.playing = false; // false while (pre)buffering
    this.ended = false;
    this.drained = false;
    this.playedSamples = 0;
    this.underruns = 0;
    this.startedOnce = false;
    this.rampIn = 0;
  }

  resetRecording() {
    this.record = new Float32Array(sampleRate * 10);
    this.recordCount = 0;
    this.recordTruncated = false;
  }

  /** Keep what was output, so the page can offer exactly what was heard. */
  keep(samples) {
    const room = sampleRate * MAX_RECORD_S - this.recordCount;
    const n = Math.min(samples.length, room);
    if (n < samples.length) this.recordTruncated = true;
    if (n <= 0) return;
    if (this.recordCount + n > this.record.length) {
      let size = this.record.length * 2;
      while (this.recordCount + n > size) size *= 2;
      const bigger = new Float32Array(size);
      bigger.set(this.record.subarray(0, this.recordCount));
      this.record = bigger;
    }
    this.record.set(samples.subarray(0, n), this.recordCount);
    this.recordCount += n;
  }

  onMessage(msg) {
    switch (msg.type) {
      case "record-reset":
        this.resetRecording();
        return;
      case "record-take": {
        const samples = this.record.slice(0, this.recordCount);
        this.port.postMessage(
          { type: "recording", id: msg.id, samples, truncated: this.recordTruncated },
          [samples.buffer],
        );
        return;
      }
      case "push":
        if (msg.gen !== this.gen) {
          if (msg.gen < this.gen) return; // audio of a stream that was cleared
          this.gen = msg.gen;
          this.resetStream();
        }
        this.write(msg.samples);
        break;
      case "end":
        if (msg.gen === this.gen) this.ended = true;
        break;
      case "clear":
        this.gen = msg.gen;
        this.resetStream();
        this.report(true);
        return;
      case "config":
        this.prebufferSamples = Math.max(0, Math.round((sampleRate * msg.prebufferMs) / 1000));
        break;
    }
    this.dirty = true;
  }

  write(samples) {
    const n = samples.length;
    if (this.count + n > this.ring.length) {
      let size = this.ring.length * 2;
      while (this.count + n > size) size *= 2;
      const bigger = new Float32Array(size);
      this.copyOut(bigger, 0, this.count);
      this.ring = bigger;
      this.readIndex = 0;
    }
    const cap = this.ring.length;
    const writeIndex = (this.readIndex + this.count) % cap;
    const first = Math.min(n, cap - writeIndex);
    this.ring.set(samples.subarray(0, first), writeIndex);
    if (first < n) this.ring.set(samples.subarray(first), 0);
    this.count += n;
  }

  // Copy `n` queued samples (without consuming them) into `dst` at `offset`.
  copyOut(dst, offset, n) {
    const cap = this.ring.length;
    const first = Math.min(n, cap - this.readIndex);
    dst.set(this.ring.subarray(this.readIndex, this.readIndex + first), offset);
    if (first < n) dst.set(this.ring.subarray(0, n - first), offset + first);
  }

  process(_inputs, outputs) {
    const out = outputs[0][0];
    const frames = out.length;
    if (!this.playing && this.count > 0 && (this.count >= this.prebufferSamples || this.ended)) {
      this.playing = true;
      this.rampIn = RAMP_SAMPLES;
      if (!this.startedOnce) {
        this.startedOnce = true;
        this.port.postMessage({ type: "first-play", gen: this.gen });
      }
    }
    let written = 0;
    if (this.playing) {
      written = Math.min(frames, this.count);
      this.copyOut(out, 0, written);
      this.readIndex = (this.readIndex + written) % this.ring.length;
      this.count -= written;
      this.playedSamples += written;
      this.totalPlayedSamples += written;
      for (let i = 0; i < written && this.rampIn > 0; i++, this.rampIn--) {
        out[i] *= 1 - this.rampIn / RAMP_SAMPLES;
      }
      if (this.count === 0) {
        this.playing = false;
        if (this.ended) {
          if (!this.drained) {
            this.drained = true;
            this.report(true);
            this.port.postMessage({ type: "drained", gen: this.gen });
          }
        } else {
          // Ran dry mid-stream: an underrun. Fade the tail out and go back to
          // prebuffering, so playback resumes with a margin instead of stuttering.
          this.underruns += 1;
          const ramp = Math.min(RAMP_SAMPLES, written);
          for (let i = 0; i < ramp; i++) out[written - ramp + i] *= 1 - (i + 1) / ramp;
        }
      }
      if (written > 0) {
        this.keep(out.subarray(0, written));
        this.dirty = true;
      }
    }
    if (!this.playing && this.ended && this.count === 0 && !this.drained) {
      // "end" came after the buffer had already run dry (or with no audio at all).
      this.drained = true;
      this.report(true);
      this.port.postMessage({ type: "drained", gen: this.gen });
    }
    out.fill(0, written);
    for (let ch = 1; ch < outputs[0].length; ch++) outputs[0][ch].set(out);
    const sinceReport = currentTime - this.lastReport;
    if (sinceReport >= HEARTBEAT_INTERVAL_S || (this.dirty && sinceReport >= REPORT_INTERVAL_S)) {
      this.report(true);
    }
    return true;
  }

  report(force) {
    if (!force && !this.dirty) return;
    this.dirty = false;
    this.lastReport = currentTime;
    this.port.postMessage({
      type: "state",
      gen: this.gen,
      bufferedSamples: this.count,
      bufferedMs: (this.count * 1000) / sampleRate,
      playedSamples: this.playedSamples,
      underruns: this.underruns,
      playing: this.playing,
      ended: this.ended,
      drained: this.drained,
      totalPlayedSamples: this.totalPlayedSamples,
    });
  }
}

registerProcessor("pcm-player", PcmPlayer);
