// Policy editor. The form is built from the server's own schema (/openapi.json, the Policy model), so a
// new policy field shows up without a dashboard change, with its bounds and description. Validation is
// the server's: a 422 names fields in `errors[].loc`, and each message is shown under its field. Writes
// carry If-Match, so two people editing at once cannot silently overwrite each other (412).

import { ApiError, api, can } from "./api.js";

function resolve(schema, components) {
  if (schema && schema.$ref) return components[schema.$ref.split("/").pop()] || {};
  return schema || {};
}

/** {kind, nullable, enum, bounds} of one property of the Policy schema. */
function describe(prop, components) {
  let s = resolve(prop, components), nullable = false;
  if (s.anyOf) {
    const kinds = s.anyOf.map((x) => resolve(x, components));
    nullable = kinds.some((k) => k.type === "null");
    s = { ...s, ...(kinds.find((k) => k.type !== "null") || {}) };
  }
  const bounds = [];
  if (s.minimum !== undefined) bounds.push(`≥ ${s.minimum}`);
  if (s.exclusiveMinimum !== undefined) bounds.push(`> ${s.exclusiveMinimum}`);
  if (s.maximum !== undefined) bounds.push(`≤ ${s.maximum}`);
  if (s.exclusiveMaximum !== undefined) bounds.push(`< ${s.exclusiveMaximum}`);
  const kind = s.enum ? "enum" : s.type === "boolean" ? "boolean" : ["number", "integer"].includes(s.type) ? s.type : "json";
  return { kind, nullable, options: s.enum, bounds: bounds.join(", "), description: prop.description || s.description || "" };
}

export class PolicyEditor {
  constructor(root, { onSaved } = {}) {
    this.form = root.querySelector("#policy-form");
    this.fieldset = root.querySelector("#policy-fields");
    this.grid = root.querySelector("#policy-grid");
    this.formError = root.querySelector("#policy-error");
    this.msg = root.querySelector("#policy-msg");
    this.note = root.querySelector("#policy-note");
    this.sub = root.querySelector("#policy-sub");
    this.versions = root.querySelector("#policy-versions");
    this.onSaved = onSaved;
    this.schema = null; this.components = {}; this.deployment = null; this.etag = null; this.version = null;
    this.dirty = false; this.role = "viewer";
    this.form.addEventListener("submit", (ev) => { ev.preventDefault(); this.save(); });
    this.form.addEventListener("input", () => { this.dirty = true; this.msg.textContent = "unsaved changes"; });
    root.querySelector("#policy-reset").addEventListener("click", () => this.load(this.deployment, true));
  }

  async loadSchema() {
    try {
      const spec = await api.openapi();
      this.components = spec.components.schemas;
      this.schema = this.components.Policy;
    } catch {
      this.schema = null; // fall back to the types of the current values
    }
  }

  setRole(role, who) {
    this.role = role;
    const canEdit = can(role, "admin");
    this.fieldset.disabled = !canEdit;
    this.note.textContent = canEdit ? "" : `read-only: changing the policy needs an admin token (you are ${who || "anonymous"}, ${role})`;
    this.form.dataset.editable = canEdit ? "1" : "0";
  }

  /** Reads the deployment's policy; keeps the user's unsaved edits unless `force`. */
  async load(deployment, force = false) {
    if (deployment !== this.deployment) force = true;
    if (this.dirty && !force) return;
    if (!this.schema && !this.schemaTried) { this.schemaTried = true; await this.loadSchema(); }
    this.deployment = deployment;
    const { data, etag } = await api.policy(deployment);
    this.etag = etag; this.version = data.version; this.dirty = false; this.currentPolicy = data.policy;
    this.render(data.policy);
    this.clearErrors();
    this.msg.textContent = "";
    this.sub.textContent = `v${data.version} by ${data.created_by}, ${new Date(data.created_at * 1000).toLocaleString()}`
      + (data.note ? ` (${data.note})` : "");
    this.form.dataset.version = data.version;
    this.loadVersions();
  }

  async loadVersions() {
    try {
      const versions = await api.policyVersions(this.deployment);
      this.versions.replaceChildren(...versions.map((v) => {
        const li = document.createElement("li");
        li.value = v.version;
        li.textContent = `v${v.version} · ${v.policy.mode} · by ${v.created_by} · ${new Date(v.created_at * 1000).toLocaleString()}`
          + (v.note ? ` · ${v.note}` : "");
        return li;
      }));
    } catch { /* the list is a convenience; the editor works without it */ }
  }

  /** Remote change (another tab, the CLI): reload unless the user is editing. */
  notice(version) {
    if (this.deployment && version !== this.version && !this.dirty) this.load(this.deployment);
  }

  render(policy) {
    const props = this.schema ? this.schema.properties : Object.fromEntries(Object.keys(policy).map((k) => [k, {}]));
    this.grid.replaceChildren(...Object.entries(props).map(([key, prop]) => {
      const info = this.schema ? describe(prop, this.components)
        : { kind: typeof policy[key] === "number" ? "number" : "json", nullable: true, bounds: "", description: "" };
      const id = `policy-${key}`;
      const wrap = document.createElement("div");
      wrap.className = "field"; wrap.dataset.field = key; wrap.dataset.kind = info.kind; wrap.dataset.nullable = info.nullable ? "1" : "0";
      const label = document.createElement("label");
      label.htmlFor = id; label.textContent = key.replaceAll("_", " ");
      let input;
      const value = policy[key];
      if (info.kind === "enum") {
        input = document.createElement("select");
        for (const option of info.options) input.append(new Option(option, option, false, option === value));
      } else if (info.kind === "boolean") {
        input = document.createElement("input"); input.type = "checkbox"; input.checked = !!value;
      } else if (info.kind === "number" || info.kind === "integer") {
        // text, not type=number: the browser would silently turn "1,5" into "" and hide the user's typo
        input = document.createElement("input"); input.type = "text"; input.inputMode = "decimal";
        input.value = value === null || value === undefined ? "" : String(value);
        if (info.nullable) input.placeholder = "none";
      } else {
        input = document.createElement("textarea"); input.rows = 2; input.value = JSON.stringify(value ?? null);
      }
      input.id = id; input.name = key;
      const help = document.createElement("small");
      help.textContent = [info.description, info.bounds, info.nullable ? "empty: none" : ""].filter(Boolean).join(" · ");
      const error = document.createElement("div");
      error.className = "field-error"; error.id = `${id}-error`; error.setAttribute("aria-live", "polite");
      input.setAttribute("aria-describedby", error.id);
      wrap.append(label, input, help, error);
      return wrap;
    }));
  }

  /** The form as a request body; a field the browser cannot even parse is reported inline, not sent. */
  collect() {
    const body = {}, local = [];
    for (const wrap of this.grid.querySelectorAll(".field")) {
      const key = wrap.dataset.field, input = wrap.querySelector("input, select, textarea");
      const kind = wrap.dataset.kind, raw = input.value.trim();
      if (kind === "boolean") body[key] = input.checked;
      else if (kind === "enum") body[key] = input.value;
      else if (kind === "number" || kind === "integer") {
        // unparseable text goes to the server as-is, so its message (with the bounds) is the one shown
        body[key] = raw === "" ? null : Number.isFinite(Number(raw)) ? Number(raw) : raw;
      } else {
        try { body[key] = raw === "" ? null : JSON.parse(raw); } catch (err) { local.push({ loc: ["body", key], msg: `not JSON: ${err.message}` }); }
      }
    }
    return { body, local };
  }

  clearErrors() {
    this.formError.hidden = true; this.formError.textContent = "";
    for (const wrap of this.grid.querySelectorAll(".field")) {
      wrap.classList.remove("invalid");
      wrap.querySelector(".field-error").textContent = "";
    }
  }

  showErrors(errors, detail) {
    const general = [];
    for (const e of errors) {
      const loc = (e.loc || []).filter((p) => p !== "body");
      const wrap = loc.length ? this.grid.querySelector(`.field[data-field="${CSS.escape(String(loc[0]))}"]`) : null;
      if (wrap) {
        wrap.classList.add("invalid");
        const where = loc.length > 1 ? `${loc.slice(1).join(".")}: ` : "";
        const out = wrap.querySelector(".field-error");
        out.textContent = (out.textContent ? `${out.textContent}; ` : "") + where + e.msg;
      } else {
        general.push(e.msg); // a rule across fields (the model's validator) has no single field
      }
    }
    if (general.length || (!errors.length && detail)) {
      this.formError.textContent = general.length ? general.join("; ") : detail;
      this.formError.hidden = false;
    }
    const first = this.grid.querySelector(".field.invalid input, .field.invalid select, .field.invalid textarea");
    if (first) first.focus();
  }

  async save() {
    this.clearErrors();
    const { body, local } = this.collect();
    if (local.length) { this.showErrors(local); return; }
    this.msg.textContent = "saving…"; this.msg.className = "msg";
    try {
      const { data, etag } = await api.putPolicy(this.deployment, body, this.etag);
      this.dirty = false;
      this.etag = etag; this.version = data.version;
      await this.load(this.deployment, true);
      this.msg.textContent = `saved as v${data.version}`;
      this.form.dataset.saved = data.version;
      if (this.onSaved) this.onSaved(data);
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      this.msg.className = "msg bad";
      this.msg.textContent = `not saved (${err.status})`;
      if (err.status === 422) this.showErrors(err.errors, err.detail);
      else if (err.status === 412) this.showErrors([], `${err.detail} — "discard changes" loads the current version`);
      else this.showErrors([], `${err.status === 403 ? "403 forbidden: " : err.status === 401 ? "401: " : ""}${err.detail}`);
    }
  }
}
