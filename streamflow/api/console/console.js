// The streamflow web console: a runs list and a run page over the server's HTTP API (/v1).
// Plain browser JavaScript, no framework, no build step, nothing fetched but the API itself.
// The view lives in the URL hash (#/runs?status=running, #/runs/<run id>) so links and the
// back button work; the API key lives in sessionStorage and goes out as a bearer token.
//
// Everything the API returns is untrusted text. It only ever reaches the page as text nodes
// (h() below; never innerHTML), with invisible direction controls shown as visible markers, and
// JSON is rendered by a depth-limited printer. The page runs under a strict Content-Security-Policy
// (index.html): no inline script or style, no eval, no style attributes; listeners are attached
// from this file.
"use strict";

(() => {
  const KEY_STORAGE = "streamflow.apiKey";
  const POLL_MS = 1000;
  const TERMINAL = new Set(["completed", "failed", "cancelled", "continued_as_new"]);
  const STATUSES = [
    "pending", "queued", "running", "suspended", "cancelling",
    "completed", "failed", "cancelled", "continued_as_new",
  ];
  // Priorities of a start: 1 is served first, 3 is the default (POST /v1/runs "priority").
  const PRIORITIES = [1, 2, 3, 4, 5];
  const DEFAULT_PRIORITY = 3;
  const TEXT_FILTERS = [
    ["workflow", "Workflow", "name"],
    ["build", "Build", "build id"],
    ["parent", "Parent run", "run id"],
    ["created_after", "Created after", "2026-01-01T00:00:00Z"],
    ["created_before", "Created before", "ISO-8601"],
    ["ended_after", "Ended after", "ISO-8601"],
    ["ended_before", "Ended before", "ISO-8601"],
  ];

  // A run id as the API accepts it (streamflow.core.ids): anything else is not a run link.
  const RUN_ID = /^[A-Za-z0-9_-]{1,256}$/;
  // JSON nested deeper than this is shown as NESTED_TOO_DEEPLY instead of being rendered.
  const MAX_DEPTH = 64;
  const NESTED_TOO_DEEPLY = "… nested too deeply";
  // Invisible characters that reorder the text around them: shown as ⟨U+XXXX⟩ markers.
  const BIDI_CONTROLS = new Map([
    [0x061c, "ARABIC LETTER MARK"],
    [0x200e, "LEFT-TO-RIGHT MARK"],
    [0x200f, "RIGHT-TO-LEFT MARK"],
    [0x202a, "LEFT-TO-RIGHT EMBEDDING"],
    [0x202b, "RIGHT-TO-LEFT EMBEDDING"],
    [0x202c, "POP DIRECTIONAL FORMATTING"],
    [0x202d, "LEFT-TO-RIGHT OVERRIDE"],
    [0x202e, "RIGHT-TO-LEFT OVERRIDE"],
    [0x2066, "LEFT-TO-RIGHT ISOLATE"],
    [0x2067, "RIGHT-TO-LEFT ISOLATE"],
    [0x2068, "FIRST STRONG ISOLATE"],
    [0x2069, "POP DIRECTIONAL ISOLATE"],
  ]);
  const BIDI_PATTERN = /[\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]/g;
  const MARKER_PATTERN = /⟨U\+(061C|200E|200F|202[A-E]|206[6-9])⟩/g;

  const view = document.getElementById("view");
  const message = document.getElementById("message");
  // Each render bumps the generation: answers and timers of a view left behind are dropped.
  let generation = 0;
  let pollTimer = null;

  // -- untrusted text --------------------------------------------------------------------------

  const codeOf = (char) => "U+" + char.codePointAt(0).toString(16).toUpperCase().padStart(4, "0");

  // `text` as nodes to append: text nodes, with each direction control replaced by a visible
  // marker element (<span class="bidi-control">⟨U+202E⟩</span>). Never parsed as HTML.
  function marked(text) {
    const nodes = [];
    let last = 0;
    for (const found of text.matchAll(BIDI_PATTERN)) {
      if (found.index > last) nodes.push(document.createTextNode(text.slice(last, found.index)));
      const code = codeOf(found[0]);
      const marker = document.createElement("span");
      marker.className = "bidi-control";
      marker.title = code + " " + BIDI_CONTROLS.get(found[0].codePointAt(0)) + " (not applied)";
      marker.textContent = "⟨" + code + "⟩";
      nodes.push(marker);
      last = found.index + found[0].length;
    }
    if (last < text.length) nodes.push(document.createTextNode(text.slice(last)));
    return nodes;
  }

  // The same markers in a plain string: for form fields and the confirmation dialog.
  const markedString = (text) => String(text).replace(BIDI_PATTERN, (char) => "⟨" + codeOf(char) + "⟩");
  // A field's text as it was before markedString (what the operator sees is what is sent).
  const unmarkedString = (text) =>
    text.replace(MARKER_PATTERN, (_, hex) => String.fromCodePoint(parseInt(hex, 16)));

  // At most `limit` characters of `text`, saying how long it was when cut.
  function shortened(text, limit) {
    const chars = Array.from(text);
    if (chars.length <= limit) return text;
    return chars.slice(0, limit).join("") + "… (" + chars.length + " characters)";
  }

  // -- small helpers ---------------------------------------------------------------------------

  // Builds an element; children are nodes or text (never parsed as HTML: run data is untrusted,
  // and its direction controls are marked). No style attribute: the CSP forbids them.
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
      if (child instanceof Node) node.append(child);
      else node.append(...marked(String(child)));
    }
    return node;
  }

  // A payload sealed by the payload codec ({"$sealed": {"key", "data"}}), which the API answers
  // as it is when its host does not hold the key: shown as what it is, never as ciphertext.
  const sealedKey = (item) => {
    if (item === null || typeof item !== "object" || Array.isArray(item)) return null;
    const keys = Object.keys(item);
    if (keys.length !== 1 || keys[0] !== "$sealed") return null;
    const body = item["$sealed"];
    return body && typeof body.key === "string" ? body.key : "?";
  };

  // JSON.stringify(value, null, 2), but containers nested deeper than maxDepth are shown as
  // NESTED_TOO_DEEPLY, so that no value the API returns can exhaust the stack, and a sealed
  // payload as "encrypted (key K)". Strings go through JSON.stringify, which escapes lone
  // surrogates.
  function pretty(value, maxDepth = MAX_DEPTH) {
    const out = [];
    const write = (item, depth, indent) => {
      const sealed = sealedKey(item);
      if (sealed !== null) {
        out.push("encrypted (key " + sealed + ")");
        return;
      }
      if (item === null || typeof item !== "object") {
        const text = JSON.stringify(item);
        out.push(text === undefined ? "null" : text);
        return;
      }
      if (depth >= maxDepth) {
        out.push(NESTED_TOO_DEEPLY);
        return;
      }
      const isArray = Array.isArray(item);
      const entries = isArray ? item.map((v) => [null, v]) : Object.entries(item);
      if (!entries.length) {
        out.push(isArray ? "[]" : "{}");
        return;
      }
      const inner = indent + "  ";
      out.push(isArray ? "[" : "{");
      entries.forEach(([key, v], i) => {
        out.push(i ? ",\n" : "\n", inner);
        if (key !== null) out.push(JSON.stringify(key), ": ");
        write(v, depth + 1, inner);
      });
      out.push("\n", indent, isArray ? "]" : "}");
    };
    write(value, 0, "");
    return out.join("");
  }

  const runHref = (runId) => "#/runs/" + encodeURIComponent(runId);
  const runLink = (runId) => (runId ? h("a", { href: runHref(runId), className: "run-link" }, runId) : "—");
  const status = (value) => h("span", { className: "status status-" + value }, value || "—");
  const orDash = (value) => (value === null || value === undefined || value === "" ? "—" : value);

  function showMessage(text, kind) {
    message.hidden = !text;
    message.className = kind || "error";
    message.replaceChildren(...marked(text ? String(text) : ""));
  }

  const describe = (err) => (err && err.message ? err.message : String(err));

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

  // Where the hash points: the runs list, a run, or a run link that is not valid (bad percent
  // escapes, or anything but a run id after #/runs/). Never throws.
  function parseHash() {
    const hash = location.hash.replace(/^#/, "") || "/runs";
    const cut = hash.indexOf("?");
    const path = cut < 0 ? hash : hash.slice(0, cut);
    const params = new URLSearchParams(cut < 0 ? "" : hash.slice(cut + 1));
    if (path.startsWith("/runs/") && path.length > "/runs/".length) {
      const raw = path.slice("/runs/".length);
      let runId;
      try {
        runId = decodeURIComponent(raw);
      } catch (_) {
        return { page: "bad-link", shown: raw };
      }
      if (!RUN_ID.test(runId)) return { page: "bad-link", shown: runId };
      return { page: "run", runId, params };
    }
    return { page: "runs", params };
  }

  function route() {
    generation += 1;
    if (pollTimer !== null) clearTimeout(pollTimer);
    pollTimer = null;
    showMessage("");
    const gen = generation;
    try {
      const where = parseHash();
      let rendered;
      if (where.page === "run") rendered = renderRun(where.runId, gen);
      else if (where.page === "bad-link") rendered = renderBadLink(where.shown);
      else rendered = renderRuns(where.params, gen);
      Promise.resolve(rendered).catch((err) => failed(err, gen));
    } catch (err) {
      failed(err, gen);
    }
  }

  // A view that broke: say so, and leave the header's navigation working.
  function failed(err, gen) {
    if (gen === generation) showMessage("The console could not show this page: " + describe(err));
  }

  function renderBadLink(shown) {
    const text = shortened(shown, 80);
    view.replaceChildren(
      h("p", {}, h("a", { href: "#/runs", id: "back-to-runs" }, "← Runs")),
      h("h1", {}, "Not a valid run link"),
      h("p", { id: "bad-link" },
        "A run link is #/runs/ followed by a run id: 1 to 256 characters of A-Z, a-z, 0-9, _ and -. "
        + "This link holds ", h("span", { className: "mono" }, text), " instead."),
    );
    showMessage("This is not a valid run link: #/runs/" + text);
  }

  // -- the runs list ---------------------------------------------------------------------------

  function filterForm(params) {
    const fields = TEXT_FILTERS.map(([name, label, placeholder]) =>
      h("label", {}, label, h("input", { name, placeholder, value: markedString(params.get(name) || "") })),
    );
    const statusSelect = h("select", { name: "status" }, h("option", { value: "" }, "any"),
      STATUSES.map((s) => h("option", { value: s, selected: params.get("status") === s }, s)));
    const incident = params.get("has_incident") || "";
    const incidentSelect = h("select", { name: "has_incident" },
      h("option", { value: "" }, "any"),
      h("option", { value: "true", selected: incident === "true" }, "with an incident"),
      h("option", { value: "false", selected: incident === "false" }, "without"));
    const limit = h("input", { name: "limit", type: "number", min: 1, max: 500, value: params.get("limit") || "", placeholder: "50" });
    // A run query (GET /v1/runs?where=...): the API answers a bad one with where it breaks.
    const where = h("input", {
      name: "where", id: "filter-where", maxlength: 4096, value: markedString(params.get("where") || ""),
      placeholder: "workflow = 'orders' AND status IN ('running', 'suspended') AND created > '2026-12-01T00:00:00Z'",
    });
    const form = h("form", { className: "filters", id: "filters" },
      fields.slice(0, 1), h("label", {}, "Status", statusSelect), fields.slice(1),
      h("label", {}, "Incident", incidentSelect), h("label", {}, "Page size", limit),
      h("label", { className: "filter-query" }, "Query", where),
      h("div", { className: "buttons" },
        h("button", { type: "submit", id: "apply-filters" }, "Apply"),
        h("button", { type: "button", onclick: () => { location.hash = "#/runs"; } }, "Clear")));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const chosen = new URLSearchParams();
      for (const [name, value] of new FormData(form)) {
        if (String(value).trim() !== "") chosen.set(name, unmarkedString(String(value).trim()));
      }
      const query = chosen.toString();
      location.hash = "#/runs" + (query ? "?" + query : "");
    });
    return form;
  }

  // Starts a run (POST /v1/runs), then opens its page. Its priority (1 first .. 5) orders the
  // queued runs of a workflow with concurrency or rate limits.
  function startForm() {
    const workflow = h("input", { id: "start-workflow", name: "workflow", placeholder: "workflow name", required: true });
    const runId = h("input", { id: "start-run-id", name: "run_id", placeholder: "run id (optional)" });
    const input = h("textarea", { id: "start-input", rows: 1, cols: 30, placeholder: "JSON input (optional)" });
    const version = h("input", { id: "start-version", name: "version", placeholder: "latest" });
    const priority = h("select", { id: "start-priority", name: "priority" },
      PRIORITIES.map((p) => h("option", { value: p, selected: p === DEFAULT_PRIORITY },
        p + (p === 1 ? " (first)" : p === 5 ? " (last)" : p === DEFAULT_PRIORITY ? " (default)" : ""))));
    const form = h("form", { id: "start-form", className: "start" },
      h("label", {}, "Workflow", workflow), h("label", {}, "Run id", runId),
      h("label", {}, "Input", input), h("label", {}, "Version", version),
      h("label", {}, "Priority", priority),
      h("button", { type: "submit", id: "start-run" }, "Start run"));
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const body = { workflow: unmarkedString(workflow.value.trim()), priority: Number(priority.value) };
      const id = unmarkedString(runId.value.trim());
      if (id) body.run_id = id;
      const chosen = unmarkedString(version.value.trim());
      if (chosen) body.version = chosen;
      const text = input.value.trim();
      if (text) {
        try {
          body.input = JSON.parse(text);
        } catch (err) {
          showMessage("InvalidJson: the input is not JSON (" + err.message + ")");
          return;
        }
      }
      try {
        const answer = await api("POST", "/v1/runs", body);
        location.hash = runHref(answer.run_id);
      } catch (err) {
        showMessage(describe(err));
      }
    });
    return h("section", { className: "panel actions" }, h("h2", {}, "Start a run"), form);
  }

  async function renderRuns(params, gen) {
    const rows = h("tbody", { id: "runs-rows" });
    const pager = h("div", { className: "pager" });
    view.replaceChildren(
      h("h1", {}, "Runs"),
      h("section", { className: "panel" }, filterForm(params)),
      startForm(),
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
      if (gen === generation) showMessage(describe(err));
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

  // A run's search attributes as "name = value" pairs, a time as its RFC 3339 text.
  function attributeText(attributes) {
    const names = Object.keys(attributes || {}).sort();
    if (names.length === 0) return "—";
    return names.map((name) => {
      const value = attributes[name];
      const shown = value !== null && typeof value === "object" && !Array.isArray(value) && "time" in value ? value.time : JSON.stringify(value);
      return name + " = " + shown;
    }).join(", ");
  }

  function facts(pairs) {
    return h("dl", { className: "facts" }, pairs.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
  }

  // One bar per progress record; a batch (a bulk operation's run) records one per page, each
  // counting every run done so far, so only its latest is drawn.
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

  // -- times -----------------------------------------------------------------------------------

  // An RFC 3339 time as the API writes it (0, 3 or 6 fractional digits) in milliseconds since
  // the epoch, microseconds kept as a fraction; null for anything else.
  const TIME = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;
  function parseTime(text) {
    const found = typeof text === "string" ? TIME.exec(text) : null;
    if (!found) return null;
    const whole = Date.parse(found[1] + found[3]);
    if (Number.isNaN(whole)) return null;
    return whole + (found[2] ? Number(found[2]) * 1000 : 0);
  }

  // A span of time for people: 350 ms, 2.1 s, 3 min 4 s, 1 h 2 min, 2 d 5 h.
  function humanDuration(ms) {
    if (ms === null || ms === undefined || !Number.isFinite(ms)) return "—";
    const span = Math.max(0, ms);
    if (span < 1000) return Math.round(span) + " ms";
    if (span < 59950) return (Math.round(span / 100) / 10).toFixed(1) + " s";
    const seconds = Math.round(span / 1000);
    if (seconds < 3600) return Math.floor(seconds / 60) + " min " + (seconds % 60) + " s";
    const minutes = Math.round(span / 60000);
    if (minutes < 24 * 60) return Math.floor(minutes / 60) + " h " + (minutes % 60) + " min";
    const hours = Math.round(span / 3600000);
    return Math.floor(hours / 24) + " d " + (hours % 24) + " h";
  }

  // The time between two API times, for people ("—" when either is missing).
  function between(from, to) {
    const start = parseTime(from);
    const end = parseTime(to);
    return start === null || end === null ? "—" : humanDuration(end - start);
  }

  // A duration still growing: "<span> so far", counted from `since` to the browser's clock and
  // kept current by tickOpen() on every refresh of an open run.
  function soFar(since) {
    const start = parseTime(since);
    if (start === null) return "—";
    const cell = h("span", { className: "so-far", "data-since": start });
    cell.textContent = humanDuration(Date.now() - start) + " so far";
    return cell;
  }

  function tickOpen(root) {
    for (const cell of root.querySelectorAll("[data-since]")) {
      const start = Number(cell.getAttribute("data-since"));
      if (Number.isFinite(start)) cell.textContent = humanDuration(Date.now() - start) + " so far";
    }
  }

  // -- the incident banner ---------------------------------------------------------------------

  // A run with an incident is stuck: its latest decision failed and the host retries it with
  // backoff. Shown above everything else on the run page.
  // Where a queued run or step attempt waits: "behind 12 for key customer-42
  // (wf:orders.fulfil concurrency, max 2, priority 3)" (no position where the server knows none).
  function queuedText(queued) {
    const limit = queued.limit || {};
    let text = queued.position === null || queued.position === undefined
      ? "waiting for a slot" : "behind " + queued.position;
    if (queued.key) text += " for key " + String(queued.key).split("\u001f").join(", ");
    let what = queued.group + (limit.limit_id ? " " + limit.limit_id : "");
    if (limit.max !== undefined && limit.max !== null) {
      what += ", max " + limit.max;
      if (limit.period_ms) what += " per " + humanDuration(limit.period_ms);
    }
    text += " (" + what + ", priority " + queued.priority + ")";
    if (queued.held_by_parent) {
      text += "; its parent " + queued.held_by_parent + " holds every slot of that limit: if the "
        + "parent waits for this run, neither can go on";
    }
    return text;
  }

  // A queued run: a badge and a line above the page, saying what it waits for.
  function queuedBanner(run) {
    if (!run.queued) return null;
    return h("section", { className: "queued-banner", id: "run-queued-banner", role: "status" },
      h("span", { className: "status status-queued", id: "run-queued-badge" }, "queued"), " ",
      h("span", { id: "run-queued-line" }, "Queued " + queuedText(run.queued)),
      h("p", { className: "muted" },
        "The run starts when its workflow's limit frees a slot: better priorities first, first come "
        + "first served within a priority, keys taking turns."));
  }

  function incidentBanner(run) {
    const incident = run.incident;
    if (!incident) return null;
    const error = typeof incident.error === "string" ? incident.error : pretty(incident.error);
    const attempts = Number.isFinite(incident.attempts)
      ? incident.attempts + (incident.attempts === 1 ? " failed decision" : " failed decisions in a row")
      : orDash(incident.attempts);
    const stuckFor = TERMINAL.has(run.status) ? null : [" (stuck for ", soFar(incident.first_at), ")"];
    return h("section", { className: "incident-banner", id: "run-incident-banner", role: "alert" },
      h("h2", {}, "This run is stuck"),
      h("p", { className: "incident-error" },
        h("strong", { className: "mono", id: "run-incident-type" }, orDash(incident.error_type)), ": ",
        h("span", { id: "run-incident-message" }, shortened(String(error), 2000))),
      facts([
        ["Attempts", h("span", { id: "run-incident-attempts" }, attempts)],
        ["Since", h("span", { id: "run-incident-since" }, orDash(incident.first_at), stuckFor)],
        ["Last attempt", h("span", { id: "run-incident-last" }, orDash(incident.last_at))],
        ["At event", orDash(incident.sequence)],
      ]),
      h("p", { className: "incident-hint", id: "run-incident-hint" },
        "Its latest decision fails, and the host keeps retrying it with backoff: fix the workflow "
        + "code (and deploy it), or cancel the run — force-cancel "
        + "(POST /v1/runs/{id}/force-cancel) ends it without running its code."),
      h("details", {}, h("summary", {}, "incident as JSON"), h("pre", { id: "run-incident" }, pretty(incident))));
  }

  // -- what history tells ----------------------------------------------------------------------

  const isObject = (value) => value !== null && typeof value === "object" && !Array.isArray(value);
  const field = (body, name) => (isObject(body) && typeof body[name] === "string" ? body[name] : null);

  // Each step's first event (its place and time of creation) and the event that ended it
  // (step_completed, step_failed), by step id.
  function stepTimes(events) {
    const times = new Map();
    for (const e of events) {
      if (!e.type.startsWith("step_")) continue;
      const stepId = field(e.body, "step_id");
      if (stepId === null) continue;
      if (!times.has(stepId)) times.set(stepId, { sequence: e.sequence, started: e.timestamp, ended: null });
      if (e.type === "step_completed" || e.type === "step_failed") times.get(stepId).ended = e.timestamp;
    }
    return times;
  }

  // Which event opens a wait of which kind, and which events resolve it (with the status each
  // gives it).
  const WAIT_OPENERS = {
    wait_created: ["timer", "wait_id"],
    signal_wait_created: ["signal", "wait_id"],
    hook_created: ["hook", "hook_id"],
    timeout_armed: ["timeout", "wait_id"],
  };
  const WAIT_CLOSERS = {
    wait_completed: ["timer", "wait_id", "completed"],
    signal_wait_completed: ["signal", "wait_id", "completed"],
    hook_received: ["hook", "hook_id", "received"],
    hook_disposed: ["hook", "hook_id", "disposed"],
    timeout_elapsed: ["timeout", "wait_id", "elapsed"],
    timeout_disarmed: ["timeout", "wait_id", "disarmed"],
  };

  const RACE_KINDS = { hook: "hook", signal_wait: "signal", timer: "timer" };

  // Every timer, signal wait, hook and timeout of the run, resolved or not, in order of creation.
  function waitRecords(run, events) {
    const records = new Map();
    const snapshotStatus = new Map();
    for (const w of run.waits || []) snapshotStatus.set("timer:" + w.wait_id, w.status);
    for (const w of run.waits || []) snapshotStatus.set("timeout:" + w.wait_id, w.status);
    for (const w of run.signal_waits || []) snapshotStatus.set("signal:" + w.wait_id, w.status);
    for (const k of run.hooks || []) snapshotStatus.set("hook:" + k.hook_id, k.status);
    for (const e of events) {
      const opener = WAIT_OPENERS[e.type];
      const closer = WAIT_CLOSERS[e.type];
      if (opener) {
        const id = field(e.body, opener[1]);
        if (id === null) continue;
        const key = opener[0] + ":" + id;
        if (records.has(key)) continue;
        let detail = null;
        if (e.type === "wait_created") detail = "until " + orDash(field(e.body, "resume_at"));
        else if (e.type === "signal_wait_created") detail = "signal " + orDash(field(e.body, "signal_name"));
        else if (e.type === "timeout_armed") detail = "for " + orDash(field(e.body, "subject")) + " " + orDash(field(e.body, "subject_id"));
        records.set(key, { key, kind: opener[0], id, detail, created: e.timestamp, resolved: null, status: null });
      } else if (closer || e.type === "race_lost") {
        // A race member that lost closes as "lost" (its kind is in the event).
        const kind = closer ? closer[0] : RACE_KINDS[field(e.body, "member")];
        const id = field(e.body, closer ? closer[1] : "member_id");
        const record = id === null || !kind ? null : records.get(kind + ":" + id);
        if (record && record.resolved === null) {
          record.resolved = e.timestamp;
          record.status = closer ? closer[2] : "lost";
        }
      }
    }
    for (const record of records.values()) {
      if (record.status === null) record.status = snapshotStatus.get(record.key) || (record.kind === "hook" ? "active" : "waiting");
    }
    return [...records.values()];
  }

  // What an event is about: its step, wait, hook, child, signal or progress id, and a second
  // word when there is one (a step's name, a signal wait's signal, a child's run id).
  function subjectOf(e) {
    const body = e.body;
    if (!isObject(body)) return null;
    const signal = isObject(body.signal) ? body.signal : null;
    const progress = isObject(body.progress) ? body.progress : null;
    const linked = isObject(body.child) ? body.child : null;
    switch (e.type) {
      case "step_created": return [field(body, "step_id"), field(body, "step_name")];
      case "signal_wait_created": return [field(body, "wait_id"), field(body, "signal_name")];
      case "signal_wait_completed": return [field(body, "wait_id"), field(body, "signal_id")];
      case "signal_received": return signal ? [field(signal, "name"), field(signal, "signal_id")] : null;
      case "child_workflow_requested": return [field(body, "child_id"), field(body, "child_run_id")];
      case "run_progress_recorded": return progress ? [field(progress, "progress_id"), null] : null;
      case "child_operation_linked": return linked ? [field(linked, "reference_id"), field(linked, "operation_id")] : null;
      case "run_continued_as_new": return [field(body, "successor_run_id"), null];
      case "timeout_armed": return [field(body, "wait_id"), field(body, "subject_id")];
      case "race_armed": return [field(body, "member_id"), field(body, "race_id")];
      case "race_lost": return [field(body, "member_id"), field(body, "member")];
      case "message_published": return [field(body, "publish_id"), field(body, "topic")];
      default:
        for (const name of ["step_id", "wait_id", "hook_id", "child_id"]) {
          if (field(body, name) !== null) return [field(body, name), null];
        }
        return null;
    }
  }

  // -- the run page's chart ---------------------------------------------------------------------

  // The run's lanes, each a list of bars in time order: the run's own wait for a slot, each
  // step's attempts (completed, failed, running) with the slot waits and retry delays between
  // them, each timer, signal wait, hook and timeout, and each child run. A bar still open at the
  // last event ends there (or now, while the run goes on).
  function chartLanes(run, events) {
    const lanes = new Map();
    const lane = (key, label, kind) => {
      if (!lanes.has(key)) lanes.set(key, { key, label, kind, bars: [] });
      return lanes.get(key);
    };
    const last = (key) => {
      const bars = lanes.has(key) ? lanes.get(key).bars : [];
      return bars.length ? bars[bars.length - 1] : null;
    };
    const close = (key, at, outcome) => {
      const bar = last(key);
      if (bar && bar.to === null) {
        bar.to = at;
        if (outcome) bar.outcome = outcome;
      }
    };
    for (const e of events) {
      const at = parseTime(e.timestamp);
      if (at === null) continue;
      const body = e.body;
      const stepId = field(body, "step_id");
      const key = "step:" + stepId;
      const attempt = isObject(body) && Number.isInteger(body.attempt) ? body.attempt : null;
      switch (e.type) {
        case "run_created":
          if (isObject(body) && isObject(body.admission)) {
            lane("run", "run", "run").bars.push({ kind: "queued", from: at, to: null, outcome: "waited" });
          }
          break;
        case "run_started":
          close("run", at);
          break;
        case "step_created":
          if (stepId !== null) lane(key, stepId + " · " + orDash(field(body, "step_name")), "step");
          break;
        case "step_attempt_queued":
          if (stepId === null) break;
          close(key, at);
          lane(key, stepId, "step").bars.push({ kind: "queued", attempt, from: at, to: null, outcome: "waited" });
          break;
        case "step_started":
          if (stepId === null) break;
          close(key, at);
          lane(key, stepId, "step").bars.push({ kind: "attempt", attempt, from: at, to: null, outcome: "running" });
          break;
        case "step_completed":
          close(key, at, "completed");
          break;
        case "step_retrying":
          close(key, at, "failed");
          if (field(body, "retry_after") !== null) {
            lane(key, stepId, "step").bars.push({ kind: "retry", from: at, to: null, outcome: "delayed" });
          }
          break;
        case "step_failed":
          close(key, at, "failed");
          break;
        case "child_workflow_requested": {
          const childId = field(body, "child_id");
          if (childId === null) break;
          const label = "child " + childId + " · " + orDash(field(body, "child_run_id"));
          lane("child:" + childId, label, "child").bars.push({ kind: "child", from: at, to: null, outcome: "running" });
          break;
        }
        case "child_workflow_resolved":
          close("child:" + field(body, "child_id"), at, "resolved");
          break;
        default:
          break;
      }
    }
    for (const w of waitRecords(run, events)) {
      const from = parseTime(w.created);
      if (from === null) continue;
      const bar = { kind: "wait-" + w.kind, from, to: parseTime(w.resolved), outcome: w.status };
      lane("wait:" + w.key, w.kind + " " + w.id, "wait").bars.push(bar);
    }
    return [...lanes.values()].filter((l) => l.bars.length);
  }

  const SVG = "http://www.w3.org/2000/svg";
  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  const CHART_WIDTH = 1000;
  const CHART_KEYS = [
    ["bar-attempt bar-completed", "attempt completed"],
    ["bar-attempt bar-failed", "attempt failed"],
    ["bar-attempt bar-running", "attempt running"],
    ["bar-queued", "waiting for a slot"],
    ["bar-retry", "retry delay"],
    ["bar-wait", "timer, signal wait, hook"],
    ["bar-child", "child run"],
  ];

  // The lanes on one time axis, from the run's first event to its last (now, while it goes on):
  // a bar's length is its duration; hovering one tells what it was, from when to when.
  function chart(run, events, open) {
    const lanes = chartLanes(run, events);
    if (!lanes.length || !events.length) return h("p", { className: "muted", id: "chart" }, "No steps, waits or children.");
    const start = parseTime(events[0].timestamp);
    let end = parseTime(events[events.length - 1].timestamp);
    if (open) end = Math.max(end, Date.now());
    const span = Math.max(end - start, 1);
    const x = (t) => ((t - start) / span) * CHART_WIDTH;
    const rows = lanes.map((l) => {
      const track = svg("svg", { class: "chart-track", viewBox: "0 0 " + CHART_WIDTH + " 12", preserveAspectRatio: "none" });
      for (const b of l.bars) {
        const to = b.to === null ? end : b.to;
        const left = x(b.from);
        const rect = svg("rect", {
          class: "chart-bar bar-" + b.kind + " bar-" + b.outcome,
          x: left.toFixed(2), y: 1, height: 10,
          width: Math.max(x(to) - left, 2).toFixed(2),
          "data-kind": b.kind, "data-outcome": b.outcome,
          "data-from": b.from, "data-to": to,
        });
        if (b.attempt !== undefined && b.attempt !== null) rect.setAttribute("data-attempt", String(b.attempt));
        const what = b.kind === "attempt" ? "attempt " + b.attempt : b.kind;
        rect.append(svg("title", {}, what + " (" + b.outcome + "): +" + humanDuration(b.from - start)
          + " → +" + humanDuration(to - start) + ", " + humanDuration(to - b.from) + (b.to === null ? ", not over" : "")));
        track.append(rect);
      }
      return h("div", { className: "chart-row", "data-lane": l.key, "data-lane-kind": l.kind },
        h("span", { className: "chart-label mono" }, l.label), track);
    });
    const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) => h("span", { className: "chart-tick" }, "+" + humanDuration(span * f)));
    return h("div", { id: "chart" }, rows,
      h("div", { className: "chart-row chart-axis" }, h("span", {}), h("div", { className: "chart-ticks" }, ticks)),
      h("p", { className: "muted chart-legend" }, CHART_KEYS.map(([classes, text]) => {
        const swatch = svg("svg", { class: "chart-swatch", viewBox: "0 0 10 10" });
        swatch.append(svg("rect", { class: "chart-bar " + classes, x: 0, y: 0, width: 10, height: 10 }));
        return h("span", { className: "chart-key" }, swatch, text);
      })));
  }

  // -- the run page's tables -------------------------------------------------------------------

  // Expanded timeline bodies stay expanded across live refreshes.
  const openEvents = new Set();

  function timeline(events) {
    const origin = events.length ? parseTime(events[0].timestamp) : null;
    return table("timeline", ["#", "Time", "Elapsed", "Type", "Subject", "Body"], events.map((e) => {
      const details = h("details", { open: openEvents.has(e.sequence) },
        h("summary", {}, "body"), h("pre", {}, pretty(e.body)));
      details.addEventListener("toggle", () => {
        if (details.open) openEvents.add(e.sequence);
        else openEvents.delete(e.sequence);
      });
      const at = parseTime(e.timestamp);
      const elapsed = origin === null || at === null ? "—" : "+" + humanDuration(at - origin);
      const subject = subjectOf(e);
      const about = subject && subject[0] !== null
        ? [h("span", { className: "subject-id" }, subject[0]),
          subject[1] ? h("span", { className: "muted subject-more" }, " · ", subject[1]) : null]
        : "—";
      return h("tr", { className: "event", "data-sequence": e.sequence },
        h("td", { className: "mono" }, e.sequence),
        h("td", { className: "mono" }, e.timestamp),
        h("td", { className: "mono event-elapsed" }, elapsed),
        h("td", { className: "mono event-type" }, e.type),
        h("td", { className: "mono event-subject" }, about),
        h("td", {}, details));
    }), "No events.");
  }

  // The steps in the order they were created, with the time of their first event, of the event
  // that ended them, and the time between.
  function stepsTable(run, events, open) {
    const times = stepTimes(events);
    const ordered = run.steps.map((s, index) => ({ s, index, t: times.get(s.step_id) || null }))
      .sort((a, b) => (a.t ? a.t.sequence : Infinity) - (b.t ? b.t.sequence : Infinity) || a.index - b.index);
    const rows = ordered.map(({ s, t }) => {
      let duration = "—";
      if (t && t.ended) duration = between(t.started, t.ended);
      else if (t && open) duration = soFar(t.started);
      return h("tr", { className: "step", "data-step-id": s.step_id },
        h("td", { className: "mono step-id" }, s.step_id),
        h("td", {}, orDash(s.name)),
        h("td", {}, status(s.status),
          s.queued ? h("div", { className: "muted step-queued" }, "queued " + queuedText(s.queued)) : null),
        h("td", {}, s.attempts),
        h("td", { className: "mono step-started" }, t ? orDash(t.started) : "—"),
        h("td", { className: "mono step-ended" }, t ? orDash(t.ended) : "—"),
        h("td", { className: "step-duration" }, duration),
        h("td", {}, s.last_error ? h("pre", {}, typeof s.last_error === "string" ? s.last_error : pretty(s.last_error)) : "—"));
    });
    return table("steps", ["Step", "Name", "Status", "Attempts", "Started", "Ended", "Duration", "Last error"], rows, "No steps.");
  }

  // Every timer, signal wait, hook and timeout, the resolved ones too, with how long each waited.
  function waitsTable(run, events, open) {
    const rows = waitRecords(run, events).map((w) => {
      let waited = "—";
      if (w.resolved) waited = between(w.created, w.resolved);
      else if (open) waited = soFar(w.created);
      return h("tr", { className: "wait", "data-kind": w.kind, "data-wait-id": w.id },
        h("td", { className: "wait-kind" }, w.kind),
        h("td", { className: "mono wait-id" }, w.id),
        h("td", { className: "mono" }, orDash(w.detail)),
        h("td", {}, status(w.status)),
        h("td", { className: "mono wait-created" }, orDash(w.created)),
        h("td", { className: "mono wait-resolved" }, orDash(w.resolved)),
        h("td", { className: "wait-waited" }, waited));
    });
    return table("waits", ["Kind", "Id", "Detail", "Status", "Created", "Resolved", "Waited"], rows, "No timers, signal waits or hooks.");
  }

  function runBody(run, events, suspensions) {
    const open = !TERMINAL.has(run.status);
    const lineage = [
      ["Parent", run.parent ? runLink(run.parent.run_id) : "—"],
      ["Continued from", run.continued_from ? runLink(run.continued_from) : "—"],
      ["Continued to", run.continued_to ? runLink(run.continued_to) : "—"],
    ];
    const children = run.children.map((c) => h("tr", {},
      h("td", { className: "mono" }, c.child_id), h("td", { className: "mono" }, runLink(c.run_id)),
      h("td", {}, status(c.status))));
    const suspended = suspensions.map((s) => h("tr", { className: "suspension" },
      h("td", {}, s.kind), h("td", { className: "mono" }, s.subject_id),
      h("td", {}, orDash(s.scheduled_at)), h("td", {}, s.due ? "due" : "")));
    const races = (run.races || []).map((r) => h("tr", { className: "race", "data-race-id": r.race_id },
      h("td", { className: "mono" }, r.race_id),
      h("td", { className: "mono race-members" }, r.members.map((m) => m.member + " " + m.member_id + " (" + m.status + ")").join(", ")),
      h("td", { className: "race-outcome" }, r.winner ? "won by " + r.winner.member + " " + r.winner.member_id : status(r.status))));
    const patches = (run.patches || []).map((p) => h("tr", { className: "patch", "data-patch-id": p.patch_id },
      h("td", { className: "mono" }, p.patch_id), h("td", { className: "mono" }, String(p.sequence))));
    const publications = (run.publications || []).map((p) => h("tr", { className: "publication", "data-publish-id": p.publish_id },
      h("td", { className: "mono" }, p.publish_id), h("td", { className: "mono" }, p.topic),
      h("td", { className: "mono" }, p.key === null ? "—" : p.key)));
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
        ["Priority", h("span", { id: "run-priority" }, orDash(run.priority))],
        ["Slot", run.slot ? h("span", { className: "mono", id: "run-slot" }, run.slot.grant_id + " since " + run.slot.granted_at) : "—"],
        ["Attributes", h("span", { className: "mono", id: "run-attributes" }, attributeText(run.attributes))],
        ["Trace", h("span", { className: "mono", id: "run-trace", title: "OpenTelemetry trace id / this run's span id" }, run.trace ? run.trace.trace_id + " / " + run.trace.span_id : "—")],
        ...lineage,
      ])),
      h("section", { className: "panel" }, h("h2", {}, "Progress"), progressBars(run.workflow === "streamflow.batch" ? run.progress.slice(-1) : run.progress)),
      h("section", { className: "panel" }, h("h2", {}, "Input"), h("pre", { id: "run-input" }, pretty(run.input)),
        h("h2", {}, "Output"), h("pre", { id: "run-output" }, pretty(run.output)),
        run.error === null || run.error === undefined ? null : [h("h2", {}, "Error"), h("pre", { id: "run-error" }, pretty(run.error))]),
      h("section", { className: "panel" }, h("h2", {}, "Steps over time"), chart(run, events, open)),
      h("section", { className: "panel" }, h("h2", {}, "Steps"), stepsTable(run, events, open)),
      h("section", { className: "panel" }, h("h2", {}, "Timers, signal waits and hooks"), waitsTable(run, events, open)),
      h("section", { className: "panel" }, h("h2", {}, "Races"),
        table("races", ["Race", "Members", "Outcome"], races, "No races.")),
      h("section", { className: "panel" }, h("h2", {}, "Patches"),
        table("patches", ["Patch", "Recorded at sequence"], patches, "No patches recorded.")),
      h("section", { className: "panel" }, h("h2", {}, "Publications"),
        table("publications", ["Publication", "Topic", "Key"], publications, "No messages published.")),
      h("section", { className: "panel" }, h("h2", {}, "Open suspensions"),
        table("suspensions", ["Kind", "Subject", "Scheduled at", ""], suspended, "Nothing open.")),
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
        showMessage(describe(err));
      }
    });
    const cancel = h("button", { type: "button", className: "danger", id: "cancel-run" }, "Cancel run");
    cancel.addEventListener("click", async () => {
      if (!window.confirm("Cancel run " + markedString(runId) + "? Its workflow code runs its cleanup and the run ends cancelled.")) return;
      try {
        const answer = await api("POST", "/v1/runs/" + encodeURIComponent(runId) + "/cancel", {});
        showMessage("Cancellation requested (status " + answer.status + ").", "info");
        refresh();
      } catch (err) {
        showMessage(describe(err));
      }
    });
    return h("section", { className: "panel actions", id: "actions" }, signalForm, cancel);
  }

  function renderRun(runId, gen) {
    const live = h("span", { className: "live", id: "live" });
    const alerts = h("div", { id: "run-alerts" });
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
      alerts,
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
        showMessage(describe(err));
        live.textContent = "";
        return;
      }
      inFlight = false;
      if (gen !== generation) return;
      let terminal;
      try {
        // Redraw only what changed: an unchanged page keeps its selection and scroll position.
        // (The depth-limited text, not JSON.stringify: no answer can overflow the stack. Its
        // limit leaves room for where the values shown sit in it: an event body is 4 levels in.)
        const seen = pretty([run, history, suspensions], MAX_DEPTH + 8);
        if (seen !== shown) {
          alerts.replaceChildren(...[incidentBanner(run), queuedBanner(run)].filter(Boolean));
          body.replaceChildren(...runBody(run, history.events, suspensions.suspensions).filter(Boolean));
          shown = seen;
        } else {
          tickOpen(view);
        }
        terminal = TERMINAL.has(run.status);
      } catch (err) {
        failed(err, gen);
        live.textContent = "";
        return;
      }
      live.textContent = terminal ? "ended" : "live";
      for (const control of document.querySelectorAll("#actions button, #actions input, #actions textarea")) {
        control.disabled = terminal;
      }
      if (!terminal) pollTimer = setTimeout(refresh, POLL_MS);
    }
    load();
  }

  // Whatever escapes a handler is reported on the page instead of leaving it half drawn.
  window.addEventListener("error", (event) => showMessage("The console failed: " + describe(event.error || event.message)));
  window.addEventListener("unhandledrejection", (event) => showMessage("The console failed: " + describe(event.reason)));

  window.addEventListener("hashchange", route);
  showKeyState();
  route();
})();
