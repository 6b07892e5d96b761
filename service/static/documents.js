// The document panel: upload the chosen file to POST /v1/documents (multipart, with the model chosen above), poll
// GET /v1/documents/{id} and show its progress, then fetch the translated file (with the API key, when one is
// entered) and offer it as a download. Depends on viewer.js (window.Viewer).
"use strict";

(function () {
  const { $, ApiError, api, authHeaders, showError, refuse, clearError, setBusy, finished } = window.Viewer;
  const POLL_MS = 400;
  const HINTS = {
    400: "The file could not be read: is it empty or damaged?",
    413: "The file is over this service's limits: send a smaller file, or split it.",
    415: "This kind of file is not translated here: choose a file of one of the types listed.",
  };
  let objectUrl = null;

  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  function showProgress(job) {
    const progress = typeof job.progress === "number" ? job.progress : 0;
    $("document-progress-box").hidden = false;
    $("document-progress").value = progress;
    const parts = [`${Math.round(progress * 100)} %`];
    if (typeof job.sentences_total === "number") parts.push(`${job.sentences_done} of ${job.sentences_total} sentences`);
    if (job.status === "queued") parts.push("waiting to start");
    if (job.status === "translating" && typeof job.seconds_remaining === "number") {
      parts.push(`about ${Math.ceil(job.seconds_remaining)} s left`);
    }
    $("document-progress-text").textContent = parts.join(", ");
  }

  async function fetchResult(job) {
    let response;
    try {
      response = await fetch(job.result_url, { headers: authHeaders() });
    } catch (err) {
      throw new ApiError(0, `could not reach the service (${err.message})`);
    }
    if (!response.ok) {
      let detail = response.statusText || "no details";
      try {
        detail = (await response.json()).detail ?? detail;
      } catch (_) {
        // not JSON: keep the status text
      }
      throw new ApiError(response.status, detail);
    }
    return response.blob();
  }

  // a link to the file held in the page (a blob: URL), so the API key never has to travel in a URL
  function offer(job, blob) {
    if (objectUrl) URL.revokeObjectURL(objectUrl);
    objectUrl = URL.createObjectURL(blob);
    const link = $("document-download");
    link.href = objectUrl;
    link.download = job.filename;
    link.textContent = `Download ${job.filename} (translated)`;
    const kept = job.untranslated_sentences
      ? `; ${job.untranslated_sentences} sentences too long for the model were kept as they were`
      : "";
    $("document-summary").textContent =
      `${job.sentences_total} sentences, ${job.source_language} → ${job.target_language} by ${job.model}${kept}.`;
    $("document-result").hidden = false;
    link.focus();
  }

  async function onUpload(event) {
    event.preventDefault();
    const form = $("document-form");
    const box = $("document-error");
    clearError(box);
    $("document-result").hidden = true;
    $("document-progress-box").hidden = true;
    const file = $("document-file").files[0];
    try {
      if (!file) {
        refuse(box, "Choose a file to translate: nothing was sent.", "document-file");
        return;
      }
      setBusy(form, "document-status", `Uploading ${file.name}…`);
      const body = new FormData();
      body.append("file", file, file.name);
      const model = window.Viewer.currentModel();
      if (model) body.append("model", model.name);
      for (const [field, code] of Object.entries(window.Viewer.chosenLanguages())) body.append(field, code);
      let job = await api("/v1/documents", body);
      setBusy(form, "document-status", `Translating ${job.filename}…`);
      showProgress(job);
      while (job.status === "queued" || job.status === "translating") {
        await sleep(POLL_MS);
        job = await api(`/v1/documents/${encodeURIComponent(job.id)}`);
        showProgress(job);
      }
      if (job.status !== "done") throw new ApiError(0, `the translation failed: ${job.error || "no reason given"}`);
      setBusy(form, "document-status", "Fetching the translated file…");
      offer(job, await fetchResult(job));
    } catch (err) {
      showError(box, err);
      if (HINTS[err.status]) box.appendChild(document.createElement("p")).textContent = HINTS[err.status];
    } finally {
      setBusy(form, "document-status", "");
      finished(form);
    }
  }

  $("document-form").addEventListener("submit", onUpload);
})();
