// The attention viewer: translate (POST /v1/translate with the chosen beam size), then read every attention
// map of that source/translation pair at once (POST /v1/attention) and draw the chosen kind, layer and head;
// sentence similarity from POST /v1/embed. Depends on heatmap.js (window.Heatmap).
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const LONG_CHARS = 400;
  const CHARS_PER_TOKEN = 4; // rough subword length, only for the long-input warning
  const KINDS = ["encoder", "decoder", "cross"];
  const FIELD_NAMES = { texts: "sentence", source: "sentence", target: "translation", beam_size: "beam size" };
  const state = { models: [], result: null };

  class ApiError extends Error {
    constructor(status, detail) {
      super(typeof detail === "string" ? detail : "request refused");
      this.status = status;
      this.detail = detail;
    }
  }

  function authHeaders() {
    const key = $("api-key").value.trim();
    return key ? { Authorization: `Bearer ${key}` } : {};
  }

  function requestHeaders() {
    return { "Content-Type": "application/json", ...authHeaders() };
  }

  // a JSON body is posted as JSON; a FormData body (a file upload) as multipart, its boundary set by the browser
  async function api(path, body) {
    const init = { headers: requestHeaders() };
    if (body instanceof FormData) Object.assign(init, { method: "POST", body, headers: authHeaders() });
    else if (body !== undefined) Object.assign(init, { method: "POST", body: JSON.stringify(body) });
    let response;
    try {
      response = await fetch(path, init);
    } catch (err) {
      throw new ApiError(0, `could not reach the service (${err.message})`);
    }
    let payload = null;
    try {
      payload = await response.json();
    } catch (_) {
      payload = null;
    }
    if (!response.ok) {
      const detail = payload && payload.detail !== undefined ? payload.detail : response.statusText || "no details";
      throw new ApiError(response.status, detail);
    }
    return payload;
  }

  // --- messages ---------------------------------------------------------------------------------
  function describeIssue(item) {
    if (!item || typeof item !== "object") return String(item);
    const parts = (item.loc || []).filter((p) => p !== "body" && typeof p !== "number");
    const field = parts.map((p) => FIELD_NAMES[p] || p).join(".");
    return field ? `${field}: ${item.msg}` : String(item.msg);
  }

  function showError(box, err) {
    box.replaceChildren();
    const head = document.createElement("p");
    const status = err.status ? ` (HTTP ${err.status})` : "";
    box.appendChild(head);
    if (Array.isArray(err.detail)) {
      head.textContent = `The service refused the request${status}:`;
      const list = document.createElement("ul");
      for (const item of err.detail) list.appendChild(document.createElement("li")).textContent = describeIssue(item);
      box.appendChild(list);
    } else {
      head.textContent = `Error${status}: ${String(err.detail)}`;
    }
    if (err.status === 401) box.appendChild(document.createElement("p")).textContent = "Enter an API key under Connection.";
    box.hidden = false;
  }

  function refuse(box, message, focusId) {
    box.replaceChildren();
    box.appendChild(document.createElement("p")).textContent = message;
    box.hidden = false;
    $(focusId).focus();
  }

  function clearError(box) {
    box.replaceChildren();
    box.hidden = true;
  }

  function setBusy(form, statusId, message) {
    $(statusId).textContent = message || "";
    form.setAttribute("aria-busy", message ? "true" : "false");
    for (const button of form.querySelectorAll("button")) button.disabled = Boolean(message);
  }

  function finished(form) {
    form.dataset.runs = String(Number(form.dataset.runs || 0) + 1); // tests wait on this counter
  }

  // --- models -----------------------------------------------------------------------------------
  // one option per direction a model serves (GET /v1/models `directions`; older servers: its one pair): a model's
  // own pair has the model's name as its value, another direction "name:source-target"
  function directionsOf(m) {
    const own = { source_language: m.source_language, target_language: m.target_language };
    return Array.isArray(m.directions) && m.directions.length ? m.directions : [own];
  }

  function currentChoice() {
    const [name, pair] = $("model").value.split(":");
    const m = state.models.find((x) => x.name === name) || null;
    if (!m) return { model: null, direction: null, own: true };
    const all = directionsOf(m);
    const d = pair && all.find((x) => `${x.source_language}-${x.target_language}` === pair);
    return { model: m, direction: d || all[0], own: !d };
  }

  function currentModel() {
    return currentChoice().model;
  }

  // the request fields naming the chosen direction (none for a model's own pair)
  function chosenLanguages() {
    const c = currentChoice();
    return c.own ? {} : { source_language: c.direction.source_language, target_language: c.direction.target_language };
  }

  function bleuText(bleu) {
    if (!bleu || typeof bleu !== "object") return "";
    const key = Object.keys(bleu).find((k) => k.startsWith("beam") && bleu[k] && typeof bleu[k].bleu === "number");
    return key ? `, BLEU ${bleu[key].bleu} (${bleu.split || "test"}, beam ${key.slice(4)})` : "";
  }

  // the limit the service applies (model and MT_MAX_TOKENS_PER_TEXT); older servers report only the model's
  function sourceLimit(m) {
    return typeof m.max_source_subwords === "number" ? m.max_source_subwords : m.max_source_tokens - 1;
  }

  // what the source box asks for, in the chosen model's source language
  const SAMPLES = { de: "Ein Mann fährt mit dem Fahrrad durch die Stadt.", zh: "我们明天去北京。" };

  function languageName(code) {
    try {
      return new Intl.DisplayNames(["en"], { type: "language" }).of(code) || code;
    } catch (err) {
      return code;
    }
  }

  function sourceName() {
    const d = currentChoice().direction;
    return d ? languageName(d.source_language) : "source";
  }

  function showSourceLanguage() {
    const d = currentChoice().direction;
    $("source-label").textContent = `${sourceName()} sentence`;
    $("source").placeholder = (d && SAMPLES[d.source_language]) || "";
  }

  function showModelInfo() {
    showSourceLanguage();
    const { model: m, direction: d } = currentChoice();
    const via = d && d.pivot ? ` (through ${d.pivot}: no attention map)` : "";
    $("model-info").textContent = m
      ? `${m.name} v${m.version}: ${d.source_language} → ${d.target_language}${via}, ${m.layers.encoder}+${m.layers.decoder} ` +
        `layers, ${m.heads} heads, d=${m.dimension}, ${m.variant}${bleuText(m.bleu)}, ` +
        `at most ${sourceLimit(m)} source subwords`
      : "No model loaded.";
  }

  async function loadModels(attempt) {
    let data;
    try {
      data = await api("/v1/models");
    } catch (err) {
      if (err.status === 503 && attempt < 60) {
        $("model-info").textContent = "The service is still loading its models…";
        setTimeout(() => loadModels(attempt + 1), 2000);
        return;
      }
      $("model-info").textContent = "The model list is unavailable.";
      showError($("error"), err);
      return;
    }
    clearError($("error")); // e.g. a 401 before an API key was entered
    state.models = data.models;
    const select = $("model");
    const previous = select.value;
    select.replaceChildren();
    const values = [];
    for (const m of data.models) {
      directionsOf(m).forEach((d, i) => {
        const option = select.appendChild(document.createElement("option"));
        option.value = i === 0 ? m.name : `${m.name}:${d.source_language}-${d.target_language}`;
        const pair = directionsOf(m).length > 1 ? `: ${d.source_language} → ${d.target_language}` : "";
        option.textContent = `${m.name}${pair} (v${m.version}, ${m.variant})`;
        values.push(option.value);
      });
    }
    select.value = values.includes(previous) ? previous : values.includes(data.default) ? data.default : values[0] || "";
    showModelInfo();
    warnIfLong();
  }

  function warnIfLong() {
    const text = $("source").value.trim();
    const m = currentModel();
    const estimate = Math.ceil(text.length / CHARS_PER_TOKEN);
    const limit = m ? sourceLimit(m) : null;
    const box = $("input-warning");
    if (text.length > LONG_CHARS || (limit !== null && estimate > limit)) {
      box.textContent =
        `Long input: ${text.length} characters, roughly ${estimate} subwords` +
        (limit !== null ? ` (this model reads at most ${limit})` : "") +
        ". The service may refuse it, and long inputs translate worse: translate one sentence at a time.";
      box.hidden = false;
    } else {
      box.textContent = "";
      box.hidden = true;
    }
  }

  // --- attention --------------------------------------------------------------------------------
  function labels(kind) {
    const a = state.result.attention;
    if (kind === "cross") return { rows: [...a.target_tokens.slice(1), "</s>"], cols: a.source_tokens };
    if (kind === "encoder") return { rows: a.source_tokens, cols: a.source_tokens };
    return { rows: a.target_tokens, cols: a.target_tokens };
  }

  function matrixFor(kind, layer, head) {
    const heads = state.result.attention[kind][layer]; // [heads][rows][cols]
    if (head !== "mean") return heads[Number(head)];
    return heads[0].map((row, i) => row.map((_, j) => heads.reduce((s, h) => s + h[i][j], 0) / heads.length));
  }

  function fillPicker(select, options, keep) {
    select.replaceChildren();
    for (const [value, text] of options) {
      const option = select.appendChild(document.createElement("option"));
      option.value = value;
      option.textContent = text;
    }
    select.value = options.some(([v]) => v === keep) ? keep : options[0][0];
  }

  function fillViewPickers() {
    const data = state.result.attention[$("kind").value];
    fillPicker($("layer"), data.map((_, i) => [String(i), `layer ${i}`]), $("layer").value);
    const heads = data[0].map((_, h) => [String(h), `head ${h}`]);
    fillPicker($("head"), [["mean", "mean of heads"], ...heads], $("head").value || "mean");
  }

  const CAPTIONS = {
    cross:
      "Cross-attention: one row per decoder step, labelled with the token it generated (the last row generates " +
      "</s>); one column per source subword. Each row sums to 1.",
    encoder: "Encoder self-attention: row = source subword, column = the source subword it attends to.",
    decoder:
      "Decoder self-attention: row = decoder input (<s>, then the translation), column = the earlier input it " +
      "attends to (causal: nothing above the diagonal).",
  };

  function draw() {
    const kind = $("kind").value;
    const layer = Number($("layer").value);
    const head = $("head").value;
    const matrix = matrixFor(kind, layer, head);
    const { rows, cols } = labels(kind);
    const which = `layer ${layer}, ${head === "mean" ? "mean of heads" : `head ${head}`}`;
    const describe = (i, j, v) => `${rows[i]} → ${cols[j]}: ${v.toFixed(3)}`;
    $("heatmap-caption").textContent = `${CAPTIONS[kind]} Showing ${which}.`;
    $("readout").textContent = "Hover a cell, or focus the map and use the arrow keys, to read its value.";
    const domain = [0, Math.max(1e-6, Heatmap.domainOf(matrix)[1])];
    Heatmap.drawHeatmap($("heatmap"), matrix, rows, cols, {
      domain,
      describe,
      onHover: (text) => ($("readout").textContent = text),
    });
    Heatmap.drawLegend($("heatmap-legend"), domain, "attention weight");
    $("lines-caption").textContent =
      `The same weights as lines (${which}): left = rows, right = columns, line opacity = weight. ` +
      "Hover a token to keep only its lines.";
    Heatmap.drawLines($("lines"), matrix, rows, cols, describe);
  }

  // what the service says of the translation: a garbled one must not look like a result
  function showQuality(translation) {
    const c = translation.confidence;
    $("confidence").textContent =
      typeof c === "number"
        ? `Confidence ${c.toFixed(2)}: the estimated probability that this translation is good.`
        : "No confidence for this translation (the model has no fitted confidence, or the text was constrained).";
    const list = $("warnings");
    list.replaceChildren();
    for (const w of translation.warnings || []) {
      const item = list.appendChild(document.createElement("li"));
      item.textContent = `${w.code}: ${w.message}`;
    }
    list.hidden = !list.children.length;
  }

  function forgetResult() {
    $("result").hidden = true;
    state.result = null;
  }

  function render() {
    const { translation, attention } = state.result;
    $("result").hidden = false;
    $("translation").textContent = translation.text;
    $("score").textContent = `(log-probability ${translation.score.toFixed(2)}; attention of ${attention.model})`;
    showQuality(translation);
    fillViewPickers();
    draw();
  }

  async function onTranslate(event) {
    event.preventDefault();
    const form = $("translate-form");
    const errorBox = $("error");
    clearError(errorBox);
    const source = $("source").value.trim();
    try {
      if (!source) {
        forgetResult(); // the previous result is not the answer to this
        refuse(errorBox, `Enter a ${sourceName()} sentence to translate: nothing was sent.`, "source");
        return;
      }
      const beam = Number($("beam-size").value);
      if (!Number.isInteger(beam) || beam < 1) {
        forgetResult();
        refuse(errorBox, "Beam size must be a whole number of at least 1: nothing was sent.", "beam-size");
        return;
      }
      warnIfLong();
      $("result").hidden = true;
      setBusy(form, "status", "Translating…");
      const model = currentModel() ? currentModel().name : undefined;
      const languages = chosenLanguages();
      const answer = await api("/v1/translate", { texts: [source], model, beam_size: beam, ...languages });
      const translation = answer.translations[0];
      if (translation.pivot) {
        // two legs through the pivot language: no attention links the source to this translation (docs/api.md)
        forgetResult();
        refuse(errorBox, `Translation (through ${translation.pivot}: “${translation.pivot_text}”): ${translation.text}. ` +
          "A direction served by pivot has no attention map.", "source");
        return;
      }
      setBusy(form, "status", "Reading the attention maps…");
      const asked = { source, target: translation.text, model: answer.model, kinds: KINDS, ...languages };
      const attention = await api("/v1/attention", asked);
      state.result = { translation, attention };
      render();
    } catch (err) {
      showError(errorBox, err);
    } finally {
      setBusy(form, "status", "");
      finished(form);
    }
  }

  // --- sentence similarity ----------------------------------------------------------------------
  function shorten(text, n) {
    const chars = Array.from(text);
    return chars.length > n ? `${chars.slice(0, n - 1).join("")}…` : text;
  }

  async function onEmbed(event) {
    event.preventDefault();
    const form = $("embed-form");
    const errorBox = $("embed-error");
    clearError(errorBox);
    const texts = $("embed-texts").value.split("\n").map((s) => s.trim()).filter(Boolean);
    try {
      if (texts.length < 2) {
        refuse(errorBox, "Enter at least two sentences, one per line: nothing was sent.", "embed-texts");
        return;
      }
      setBusy(form, "embed-status", "Embedding…");
      const answer = await api("/v1/embed", { texts, model: currentModel() ? currentModel().name : undefined, normalize: true });
      const e = answer.embeddings; // unit vectors, so dot products are cosine similarities
      const sim = e.map((a) => e.map((b) => a.reduce((s, x, k) => s + x * b[k], 0)));
      const rows = texts.map((t, i) => `${i + 1}. ${shorten(t, 32)}`);
      const cols = texts.map((_, i) => String(i + 1));
      const domain = Heatmap.domainOf(sim);
      $("similarity-figure").hidden = false;
      Heatmap.drawHeatmap($("similarity"), sim, rows, cols, {
        domain,
        describe: (i, j, v) => `“${texts[i]}” · “${texts[j]}”: ${v.toFixed(3)}`,
        onHover: (text) => ($("similarity-readout").textContent = text),
      });
      Heatmap.drawLegend($("similarity-legend"), domain, `cosine similarity (${answer.model}, d=${answer.dimension})`);
    } catch (err) {
      showError(errorBox, err);
    } finally {
      setBusy(form, "embed-status", "");
      finished(form);
    }
  }

  // --- wiring -----------------------------------------------------------------------------------
  $("translate-form").addEventListener("submit", onTranslate);
  $("embed-form").addEventListener("submit", onEmbed);
  $("embed-texts").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) $("embed-form").requestSubmit();
  });
  $("source").addEventListener("input", warnIfLong);
  $("model").addEventListener("change", () => {
    showModelInfo();
    warnIfLong();
  });
  $("api-key").addEventListener("change", () => loadModels(0));
  $("kind").addEventListener("change", () => {
    if (!state.result) return;
    fillViewPickers();
    draw();
  });
  for (const id of ["layer", "head"]) $(id).addEventListener("change", () => state.result && draw());
  loadModels(0);
  // shared with documents.js (the document panel)
  window.Viewer = { $, ApiError, api, authHeaders, showError, refuse, clearError, setBusy, finished, currentModel, chosenLanguages };
})();
