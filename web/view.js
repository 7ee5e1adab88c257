// DOM rendering: from plain data to the page's elements, no state of its own.

/** The voice picker: "server default", then the presets, then the created voices.
 * Keeps the chosen voice when it is still listed. */
export function renderVoices(select, voices, engine) {
  const chosen = select.value;
  const group = (label, members) => {
    const el = document.createElement("optgroup");
    el.label = label;
    for (const voice of members) {
      const text = voice.description ? `${voice.name} — ${voice.description}` : voice.name;
      el.append(new Option(text, voice.name));
    }
    return el;
  };
  select.replaceChildren(
    new Option("默认 server default", ""),
    group("预设 presets", voices.filter((voice) => voice.preset)),
    group("自建 created", voices.filter((voice) => !voice.preset)),
  );
  select.value = voices.some((voice) => voice.name === chosen) ? chosen : "";
  select.title = `${voices.length} voices of ${engine}`;
}

/** The banner: one line per {kind, text}; hidden when there is none. */
export function renderBanner(el, lines) {
  el.replaceChildren(
    ...lines.map((line) => {
      const p = document.createElement("p");
      p.dataset.kind = line.kind;
      p.textContent = line.text;
      return p;
    }),
  );
  el.hidden = lines.length === 0;
}

/** The alert: a refusal {status, code, message}, or hidden for null. */
export function renderAlert(el, problem) {
  el.hidden = !problem;
  el.textContent = problem ? problem.message : "";
  el.dataset.status = problem ? String(problem.status) : "";
  el.dataset.code = problem ? problem.code : "";
}

/** Append a `segment` event to the list; the newest is marked "latest". */
export function renderSegment(list, msg) {
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
  for (const old of list.querySelectorAll(".latest")) old.classList.remove("latest");
  li.classList.add("latest");
  list.append(li);
}

/** A warning about segment `index` (its code and message), shown on its list entry. */
export function markSegment(list, index, code, message) {
  const li = list.querySelector(`li[data-index="${index}"]`);
  if (!li) return;
  li.classList.add("warned");
  li.dataset.warning = code;
  li.title = `${li.title}\n⚠ ${code}: ${message}`;
}

/** Prepend a log line (level: info, warning, error), keeping at most `maxEntries`. */
export function appendLog(list, level, text, maxEntries) {
  const li = document.createElement("li");
  li.className = level;
  const time = new Date().toLocaleTimeString("zh-CN", { hour12: false });
  li.textContent = `${time} ${text}`;
  list.prepend(li);
  while (list.children.length > maxEntries) list.lastChild.remove();
  if (level !== "info") console[level === "error" ? "error" : "warn"](text);
}
