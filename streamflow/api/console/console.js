// The streamflow web console: a runs list and a run page over the server's HTTP API (/v1).
// Plain browser JavaScript, no framework, no build step, nothing fetched but the API itself.
// The view lives in the URL hash (#/runs?status=running, #/runs/<run id>) so links and the
// back button work; the API key lives in sessionStorage and goes out as a bearer token.
"use strict";

(() => {
  const KEY_STORAGE = "streamflow.apiKey";
  const POLL_MS = 1000;
  const TERMINAL = new Set(["completed", "failed", "cancelled", "continued_as_new"]);
  const STATUSES = [
    "pending", "running", "suspended", "cancelling",
    "completed", "failed", "cancelled", "continued_as_new",
  ];
  const TEXT_FILTERS = [
    ["workflow", "Workflow", "name"],
    ["build", "Build", "build id"],
    ["parent", "Parent run", "run id"],
    ["created_after", "Created after", "2026-01-01T00:00:00Z"],
    ["created_before", "Created before", "ISO-8601"],
    ["ended_after", "Ended after", "ISO-8601"],
    ["ended_before", "Ended before", "ISO-8601"],
  ];

  const view = document.getElementById("view");
  const message = document.getElementById("message");
  // Each render bumps the generation: answers and timers of a view left behind are dropped.
  let generation = 0;
  let pollTimer = null;

  // -- small helpers ---------------------------------------------------------------------------

  // Builds an element; children are nodes or text (never parsed as HTML: run data is untrusted).
  function h(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else if (name === "className") node.className = value;
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  const pretty = (value) => JSON.stringify(value, null, 2);
  const runHref = (runId) => "#/runs/" + encodeURIComponent(runId);
  const runLink = (runId) => (runId ? h("a", { href: runHref(runId), className: "run-link" }, runId) : "—");
  const status = (value) => h("span", { className: "status status-" + value }, value || "—");
  const orDash = (value) => (value === null || value === undefined || value === "" ? "—" : value);

  function showMessage(text, kind) {
    message.hidden = !text;
    message.className = kind || "error";
    message.textContent = text || "";
  }

  // -- the API ---------------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, type, text) {
      super(type + ": " + text);
      this.status = status;
      this.type = type;
    }
  }

  function apiKey() {
    return sessionStorage.getItem(KEY_STORAGE) || "";
  }

  // Calls the API; a failed call throws an ApiError carrying the server's typed error.
  async function api(method, path, body) {
    const headers = { Accept: "application/json" };
    const key = apiKey();
    if (key) headers.Authorization = "Bearer " + key;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let answer;
    try {
      answer = await fetch(path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (err) {
      throw new ApiError(0, "NetworkError", "the server did not answer (" + err.message + ")");
    }
    let data = null;
    try {
      data = await answer.json();
    } catch (_) {
      data = null;
    }
    if (!answer.ok) {
      const type = (data && data.error) || "HttpError";
      let text = (data && data.message) || answer.statusText || "request failed";
      if (answer.status === 401) text += " (enter the server's API key above)";
      throw new ApiError(answer.status, type, text);
    }
    return data;
  }

  // -- the key form ----------------------------------------------------------------------------

  function showKeyState() {
    document.getElementById("key-state").textContent = apiKey() ? "key set" : "no key";
  }

  document.getElementById("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const input = document.getElementById("api-key");
    sessionStorage.setItem(KEY_STORAGE, input.value.trim());
    input.value = "";
    showKeyState();
    route();
  });
  document.getElementById("key-forget").addEventListener("click", () => {
    sessionStorage.removeItem(KEY_STORAGE);
    showKeyState();
    route();
  });

  // -- routing ---------------------------------------------------------------------------------

  function parseHash() {
    const hash = location.hash.replace(/^#/, "") || "/runs";
    const [path, query] = hash.split("?", 2);
    const params = new URLSearchParams(query || "");
    const match = /^\/runs\/(.+)$/.exec(path);
    if (match) return { page: "run", runId: decodeURIComponent(match[1]), params };
    return { page: "runs", params };
  }

  function route() {
    generation += 1;
    if (pollTimer !== null) clearTimeout(pollTimer);
    pollTimer = null;
    showMessage("");
    const where = parseHash();
    if (where.page === "run") renderRun(where.runId, generation);
    else renderRuns(where.params, generation);
  }

  // -- the runs list ---------------------------------------------------------------------------

  function filterForm(params) {
    const fields = TEXT_FILTERS.map(([name, label, placeholder]) =>
      h("label", {}, label, h("input", { name, placeholder, value: params.get(name) || "" })),
    );
    const statusSelect = h("select", { name: "status" }, h("option", { value: "" }, "any"),
      STATUSES.map((s) => h("option", { value: s, selected: params.get("status") === s }, s)));
    const incident = params.get("has_incident") || "";
    const incidentSelect = h("select", { name: "has_incident" },
      h("option", { value: "" }, "any"),
      h("option", { value: "true", selected: incident === "true" }, "with an incident"),
      h("option", { value: "false", selected: incident === "false" }, "without"));
    const limit = h("input", { name: "limit", type: "number", min: 1, max: 500, value: params.get("limit") || "" , placeholder: "50" });
    const form = h("form", { className: "filters", id: "filters" },
      fields.slice(0, 1), h("label", {}, "Status", statusSelect), fields.slice(1),
      h("label", {}, "Incident", incidentSelect), h("label", {}, "Page size", limit),
      h("div", { className: "buttons" },
        h("button", { type: "submit", id: "apply-filters" }, "Apply"),
        h("button", { type: "button", onclick: () => { location.hash = "#/runs"; } }, "Clear")));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const chosen = new URLSearchParams();
      for (const [name, value] of new FormData(form)) {
        if (String(value).trim() !== "") chosen.set(name, String(value).trim());
      }
      const query = chosen.toString();
      location.hash = "#/runs" + (query ? "?" + query : "");
    });
    return form;
  }

  async function renderRuns(params, gen) {
    const rows = h("tbody", { id: "runs-rows" });
    const pager = h("div", { className: "pager" });
    view.replaceChildren(
      h("h1", {}, "Runs"),
      h("section", { className: "panel" }, filterForm(params)),
      h("section", { className: "panel" },
        h("table", { id: "runs-table" },
          h("thead", {}, h("tr", {}, ["Run", "Workflow", "Status", "Build", "Parent", "Created", "Ended", "Incident"].map((t) => h("th", {}, t)))),
          rows),
        pager),
    );
    let page;
    try {
      page = await api("GET", "/v1/runs?" + params.toString());
    } catch (err) {
      if (gen === generation) showMessage(err.message);
      return;
    }
    if (gen !== generation) return;
    for (const run of page.runs) {
      rows.append(h("tr", { className: "run-row", "data-run-id": run.run_id },
        h("td", { className: "mono" }, runLink(run.run_id)),
        h("td", {}, orDash(run.workflow)),
        h("td", {}, status(run.status)),
        h("td", { className: "mono" }, orDash(run.build)),
        h("td", { className: "mono" }, run.parent_run_id ? runLink(run.parent_run_id) : "—"),
        h("td", {}, orDash(run.created_at)),
        h("td", {}, orDash(run.ended_at)),
        h("td", {}, run.has_incident ? "yes" : "")));
    }
    if (page.runs.length === 0) {
      rows.append(h("tr", {}, h("td", { colspan: 8, className: "muted" }, "No runs match.")));
    }
    if (params.has("cursor")) {
      pager.append(h("a", { href: "#/runs", id: "first-page" }, "First page"));
    }
    if (page.next_cursor) {
      const next = new URLSearchParams(params);
      next.set("cursor", page.next_cursor);
      pager.append(h("a", { href: "#/runs?" + next.toString(), id: "next-page" }, "Next page"));
    }
  }

  // -- the run page ----------------------------------------------------------------------------

  function facts(pairs) {
    return h("dl", { className: "facts" }, pairs.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
  }

  function progressBars(records) {
    if (!records.length) return h("p", { className: "muted" }, "No progress recorded.");
    return records.map((p) => {
      const bar = h("progress", { className: "progress-bar", "data-progress-id": p.progress_id });
      if (p.total !== null && p.total !== undefined) {
        bar.max = Math.max(p.total, 1);
        bar.value = Math.min(p.completed, bar.max);
      }
      const amount = p.total === null || p.total === undefined
        ? String(p.completed)
        : p.completed + " / " + p.total;
      return h("div", { className: "progress" },
        h("span", { className: "mono" }, p.progress_id),
        bar,
        h("span", {}, amount, p.message ? " — " + p.message : ""));
    });
  }

  function table(id, headings, rows, empty) {
    if (!rows.length) return h("p", { className: "muted", id }, empty);
    return h("table", { id },
      h("thead", {}, h("tr", {}, headings.map((t) => h("th", {}, t)))),
      h("tbody", {}, rows));
  }

  // Expanded timeline bodies stay expanded across live refreshes.
  const openEvents = new Set();

  function timeline(events) {
    return table("timeline", ["#", "Time", "Type", "Body"], events.map((e) => {
      const details = h("details", { open: openEvents.has(e.sequence) },
        h("summary", {}, "body"), h("pre", {}, pretty(e.body)));
      details.addEventListener("toggle", () => {
        if (details.open) openEvents.add(e.sequence);
        else openEvents.delete(e.sequence);
      });
      return h("tr", { className: "event", "data-sequence": e.sequence },
        h("td", { className: "mono" }, e.sequence),
        h("td", { className: "mono" }, e.timestamp),
        h("td", { className: "mono event-type" }, e.type),
        h("td", {}, details));
    }), "No events.");
  }

  function runBody(run, events, suspensions) {
    const lineage = [
      ["Parent", run.parent ? runLink(run.parent.run_id) : "—"],
      ["Continued from", run.continued_from ? runLink(run.continued_from) : "—"],
      ["Continued to", run.continued_to ? runLink(run.continued_to) : "—"],
    ];
    const children = run.children.map((c) => h("tr", {},
      h("td", { className: "mono" }, c.child_id), h("td", { className: "mono" }, runLink(c.run_id)),
      h("td", {}, status(c.status))));
    const steps = run.steps.map((s) => h("tr", { className: "step" },
      h("td", { className: "mono" }, s.step_id), h("td", {}, orDash(s.name)), h("td", {}, status(s.status)),
      h("td", {}, s.attempts), h("td", {}, s.last_error ? h("pre", {}, typeof s.last_error === "string" ? s.last_error : pretty(s.last_error)) : "—")));
    const open = suspensions.map((s) => h("tr", { className: "suspension" },
      h("td", {}, s.kind), h("td", { className: "mono" }, s.subject_id),
      h("td", {}, orDash(s.scheduled_at)), h("td", {}, s.due ? "due" : "")));
    const hooks = run.hooks.map((k) => h("tr", {},
      h("td", { className: "mono" }, k.hook_id), h("td", {}, status(k.status)),
      h("td", { className: "mono" }, k.token_digest)));
    return [
      h("section", { className: "panel" }, facts([
        ["Status", h("span", { id: "run-status" }, status(run.status))],
        ["Workflow", orDash(run.workflow)],
        ["Version", orDash(run.version)],
        ["Build", orDash(run.build)],
        ["Created", orDash(run.created_at)],
        ["Ended", orDash(run.ended_at)],
        ["Cancellation requested", run.cancellation_requested ? "yes" : "no"],
        ...lineage,
      ])),
      h("section", { className: "panel" }, h("h2", {}, "Progress"), progressBars(run.progress)),
      h("section", { className: "panel" }, h("h2", {}, "Input"), h("pre", { id: "run-input" }, pretty(run.input)),
        h("h2", {}, "Output"), h("pre", { id: "run-output" }, pretty(run.output)),
        run.error === null || run.error === undefined ? null : [h("h2", {}, "Error"), h("pre", { id: "run-error" }, pretty(run.error))]),
      run.incident ? h("section", { className: "panel" }, h("h2", {}, "Incident"), h("pre", { id: "run-incident" }, pretty(run.incident))) : null,
      h("section", { className: "panel" }, h("h2", {}, "Steps"),
        table("steps", ["Step", "Name", "Status", "Attempts", "Last error"], steps, "No steps.")),
      h("section", { className: "panel" }, h("h2", {}, "Open suspensions"),
        table("suspensions", ["Kind", "Subject", "Scheduled at", ""], open, "Nothing open.")),
      h("section", { className: "panel" }, h("h2", {}, "Hooks"),
        table("hooks", ["Hook", "Status", "Token digest (SHA-256)"], hooks, "No hooks.")),
      h("section", { className: "panel" }, h("h2", {}, "Children"),
        table("children", ["Child", "Run", "Status"], children, "No children.")),
      h("section", { className: "panel" }, h("h2", {}, "Timeline (" + events.length + " events)"), timeline(events)),
    ];
  }

  function actions(runId, refresh) {
    const name = h("input", { id: "signal-name", placeholder: "signal name", required: true });
    const payload = h("textarea", { id: "signal-payload", rows: 1, cols: 30, placeholder: "JSON payload (optional)" });
    const signalForm = h("form", { id: "signal-form" },
      h("label", {}, "Signal", name), h("label", {}, "Payload", payload),
      h("button", { type: "submit", id: "signal-send" }, "Send signal"));
    signalForm.addEventListener("submit", async (event) => {
      event.preventDefault();
      const body = { name: name.value.trim() };
      const text = payload.value.trim();
      if (text) {
        try {
          body.payload = JSON.parse(text);
        } catch (err) {
          showMessage("InvalidJson: the payload is not JSON (" + err.message + ")");
          return;
        }
      }
      try {
        await api("POST", "/v1/runs/" + encodeURIComponent(runId) + "/signals", body);
        showMessage("Signal " + body.name + " accepted.", "info");
        refresh();
      } catch (err) {
        showMessage(err.message);
      }
    });
    const cancel = h("button", { type: "button", className: "danger", id: "cancel-run" }, "Cancel run");
    cancel.addEventListener("click", async () => {
      if (!window.confirm("Cancel run " + runId + "? Its workflow code runs its cleanup and the run ends cancelled.")) return;
      try {
        const answer = await api("POST", "/v1/runs/" + encodeURIComponent(runId) + "/cancel", {});
        showMessage("Cancellation requested (status " + answer.status + ").", "info");
        refresh();
      } catch (err) {
        showMessage(err.message);
      }
    });
    return h("section", { className: "panel actions", id: "actions" }, signalForm, cancel);
  }

  function renderRun(runId, gen) {
    const live = h("span", { className: "live", id: "live" });
    const body = h("div", { id: "run-body" });
    openEvents.clear();
    let inFlight = false;
    let shown = "";
    const refresh = () => {
      if (gen === generation && !inFlight) load();
    };
    view.replaceChildren(
      h("p", {}, h("a", { href: "#/runs" }, "← Runs")),
      h("h1", {}, "Run ", h("span", { className: "mono", id: "run-id" }, runId), live),
      actions(runId, refresh),
      body,
    );
    const path = "/v1/runs/" + encodeURIComponent(runId);
    async function load() {
      inFlight = true;
      if (pollTimer !== null) clearTimeout(pollTimer);
      pollTimer = null;
      let run, history, suspensions;
      try {
        [run, history, suspensions] = await Promise.all([
          api("GET", path), api("GET", path + "/history"), api("GET", path + "/suspensions"),
        ]);
      } catch (err) {
        inFlight = false;
        if (gen !== generation) return;
        showMessage(err.message);
        live.textContent = "";
        return;
      }
      inFlight = false;
      if (gen !== generation) return;
      // Redraw only what changed: an unchanged page keeps its selection and scroll position.
      const seen = JSON.stringify([run, history, suspensions]);
      if (seen !== shown) {
        shown = seen;
        body.replaceChildren(...runBody(run, history.events, suspensions.suspensions).filter(Boolean));
      }
      const terminal = TERMINAL.has(run.status);
      live.textContent = terminal ? "ended" : "live";
      for (const control of document.querySelectorAll("#actions button, #actions input, #actions textarea")) {
        control.disabled = terminal;
      }
      if (!terminal) pollTimer = setTimeout(refresh, POLL_MS);
    }
    load();
  }

  window.addEventListener("hashchange", route);
  showKeyState();
  route();
})();
