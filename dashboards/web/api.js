// The controller's REST API, as the dashboard uses it. One place knows the token and how errors look,
// so panels can show the server's own words (its `detail`, and `errors` for inline field messages).

const TOKEN_KEY = "moectl.token";

// sessionStorage, not localStorage: a pasted token dies with the tab, which is what a shared screen wants
export const token = {
  get: () => sessionStorage.getItem(TOKEN_KEY) || "",
  set: (value) => (value ? sessionStorage.setItem(TOKEN_KEY, value) : sessionStorage.removeItem(TOKEN_KEY)),
};

export class ApiError extends Error {
  constructor(status, detail, errors = []) {
    super(`${status}: ${detail}`);
    this.status = status;
    this.detail = detail; // one readable line from the server
    this.errors = errors; // [{loc, msg, type}] on 422, for inline messages
  }
}

async function request(method, path, { body, headers = {}, signal } = {}) {
  const h = { Accept: "application/json", ...headers };
  const t = token.get();
  if (t) h.Authorization = `Bearer ${t}`;
  if (body !== undefined) h["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(path, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body), signal });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, `cannot reach the controller (${err.message})`);
  }
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (!response.ok) {
    const detail = data && typeof data.detail === "string" ? data.detail
      : data && data.detail ? JSON.stringify(data.detail) : `${response.status} ${response.statusText}`;
    throw new ApiError(response.status, detail, (data && data.errors) || []);
  }
  return { data, etag: response.headers.get("ETag") };
}

const get = async (path, opts) => (await request("GET", path, opts)).data;
const enc = encodeURIComponent;

export const api = {
  whoami: () => get("/v1/whoami"),
  deployments: (opts) => get("/v1/deployments", opts),
  overview: (name, opts) => get(`/v1/deployments/${enc(name)}/overview`, opts),
  load: (name, role, opts) => get(`/v1/deployments/${enc(name)}/pools/${enc(role)}/load`, opts),
  actions: (name, opts) => get(`/v1/deployments/${enc(name)}/actions?limit=100`, opts),
  policy: (name) => request("GET", `/v1/deployments/${enc(name)}/policy`), // {data, etag}
  policyVersions: (name) => get(`/v1/deployments/${enc(name)}/policy/versions`),
  putPolicy: (name, policy, etag) =>
    request("PUT", `/v1/deployments/${enc(name)}/policy`, { body: policy, headers: etag ? { "If-Match": etag } : {} }),
  approve: (id) => request("POST", `/v1/actions/${enc(id)}/approve`).then((r) => r.data),
  reject: (id) => request("POST", `/v1/actions/${enc(id)}/reject`).then((r) => r.data),
  rebalance: (name, dryRun, role) =>
    request("POST", `/v1/deployments/${enc(name)}/rebalance`, { body: { dry_run: dryRun, role: role || null } })
      .then((r) => r.data),
  // the policy's field types, bounds and descriptions, so the editor follows the server's schema
  openapi: () => get("/openapi.json"),
};

// viewer < operator < admin, as the server ranks them (controlplane/api/deps.py)
export const RANK = { viewer: 1, operator: 2, admin: 3 };
export const can = (role, needed) => (RANK[role] || 0) >= RANK[needed];
