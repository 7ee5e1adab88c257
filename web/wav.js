// WAV files in the browser: what the player played, as a download.

const HEADER_BYTES = 44;

/**
 * A 16-bit PCM mono WAV of `samples` (Float32 in [-1, 1], clipped) at `sampleRateHz`.
 * The inverse of the wire's int16 -> float mapping (x / 32768), so samples that came
 * over the wire unchanged get their original int16 values back.
 */
export function encodeWav(samples, sampleRateHz) {
  const dataBytes = samples.length * 2;
  const buffer = new ArrayBuffer(HEADER_BYTES + dataBytes);
  const view = new DataView(buffer);
  const ascii = (offset, text) => {
    for (let i = 0; i < text.length; i++) view.setUint8(offset + i, text.charCodeAt(i));
  };
  ascii(0, "RIFF");
  view.setUint32(4, HEADER_BYTES - 8 + dataBytes, true);
  ascii(8, "WAVE");
  ascii(12, "fmt ");
  view.setUint32(16, 16, true); // fmt chunk size
  view.setUint16(20, 1, true); // PCM
  view.setUint16(22, 1, true); // mono
  view.setUint32(24, sampleRateHz, true);
  view.setUint32(28, sampleRateHz * 2, true); // bytes per second
  view.setUint16(32, 2, true); // bytes per frame
  view.setUint16(34, 16, true); // bits per sample
  ascii(36, "data");
  view.setUint32(40, dataBytes, true);
  for (let i = 0; i < samples.length; i++) {
    const value = Math.round(samples[i] * 32768);
    view.setInt16(HEADER_BYTES + 2 * i, Math.max(-32768, Math.min(32767, value)), true);
  }
  return new Blob([buffer], { type: "audio/wav" });
}

/** Offer `blob` as a file download named `filename`. */
export function saveFile(blob, filename) {
  const url = URL.createObjectURL(blob);
  const link = document.createElement("a");
  link.href = url;
  link.download = filename;
  link.hidden = true;
  document.body.append(link);
  link.click();
  link.remove();
  // The download has its own reference by now; let the page's go.
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}
