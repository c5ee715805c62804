// django-rivet browser client. A plain ES module, no build step:
//
//   import { createClient } from "/static/django_rivet/rivet.js";
//   const client = createClient("/rivet");
//   const room = client.actor("chatRoom", ["acme", "general"]);
//   await room.call("send_message", "bob", "hi");          // HTTP
//
//   const conn = room.connect({ name: "bob" });             // WebSocket
//   const off = conn.on("newMessage", (user, text) => render(user, text));
//   await conn.call("send_message", "hi");
//   conn.status;   // "connecting" | "connected" | "disconnected"
//   conn.close();
//
//   // Server-Sent Events (EventSource): a workflow's stream, an actor's events.
//   client.workflowStream("report-42", "rows", { onValue: (value, offset) => add(value),
//                                               onClose: () => done() });
//   const feed = room.events({ subscribe: ["newMessage"] });
//   feed.on("newMessage", (user, text) => render(user, text));
//
// A dropped connection reconnects with exponential backoff and resumes its
// event stream with `since`, so events sent while it was away are delivered
// once, in order. Calls in flight when it dropped are rejected with the
// error `client/connection_lost` (they may or may not have run).
// Encoding is JSON; bytes arrive as {"$bytes": "<base64>"} (docs/protocol.md).

const FINAL_CLOSE_CODES = new Set([1000, 4400, 4403]);
// The server closes with 4413 after a frame it could not read (too large):
// pending calls fail with the error frame it sent just before.
const FRAME_CLOSE_CODE = 4413;
// Frame size limit until init says otherwise (the server's default).
const DEFAULT_MAX_FRAME_BYTES = 65536;
// Error frames saying events will not come: the app reloads its state.
const RESYNC_CODES = new Set(["actor/events_missed", "actor/event_log_truncated"]);

/** An error from the server ({group, code, message, metadata}) or the client. */
export class RivetError extends Error {
  constructor({ group = "rivet", code = "internal_error", message = "", metadata = null } = {}) {
    super(message);
    this.name = "RivetError";
    this.group = group;
    this.code = code;
    this.metadata = metadata;
  }

  get qualifiedCode() {
    return `${this.group}/${this.code}`;
  }
}

function keyParts(key) {
  if (key === undefined || key === null) return [];
  return Array.isArray(key) ? key.map(String) : [String(key)];
}

function base64url(text) {
  const bytes = new TextEncoder().encode(text);
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** How long to wait before the next reconnection: exponential, with jitter. */
function backoff(client, attempt) {
  const { initialDelay, maxDelay } = client.reconnect;
  return Math.min(maxDelay, initialDelay * 2 ** attempt) * (0.5 + Math.random() / 2);
}

/** Create a client for the django-rivet routes mounted at `baseUrl`. */
export function createClient(baseUrl, options = {}) {
  return new Client(baseUrl, options);
}

export class Client {
  constructor(baseUrl, { headers = {}, credentials = "same-origin", reconnect = {} } = {}) {
    const location = globalThis.location ? globalThis.location.href : undefined;
    this.baseUrl = new URL(baseUrl.replace(/\/+$/, "") + "/", location);
    this.headers = headers;
    this.credentials = credentials;
    this.reconnect = { initialDelay: 250, maxDelay: 10000, ...reconnect };
  }

  /** Address an actor by name and key (a string or an array of strings). */
  actor(name, key, options = {}) {
    return new ActorHandle(this, name, keyParts(key), options);
  }

  /**
   * Follow a workflow's stream (`ctx.write_stream`) over Server-Sent Events.
   * Options: `since` (the values after that offset; 0: all), `onValue(value,
   * offset)`, `onClose()` (the stream was closed or the workflow finished:
   * every value was delivered), `onError(error)`. Resumes by itself after a
   * dropped network, with no gap and no repeat. `stream.close()` stops.
   */
  workflowStream(workflowId, key, { since = 0, onValue, onClose, onError } = {}) {
    const path = `workflows/${encodeURIComponent(workflowId)}/streams/${encodeURIComponent(key)}`;
    const follower = new EventFollower(this, path, [], since, { onClose, onError });
    if (onValue) follower.on("message", (value) => onValue(value, follower.lastId));
    return follower;
  }

  url(path, params, protocol) {
    const url = new URL(path.replace(/^\//, ""), this.baseUrl);
    for (const [name, value] of params) url.searchParams.append(name, value);
    if (protocol) url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    return url.toString();
  }

  async request(method, path, params, body) {
    const init = {
      method,
      credentials: this.credentials,
      headers: { Accept: "application/json", ...this.headers },
    };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(this.url(path, params), init);
    let data = null;
    if ((response.headers.get("Content-Type") || "").startsWith("application/json")) {
      data = await response.json();
    }
    if (!response.ok) {
      if (data && data.group && data.code) throw new RivetError(data);
      throw new RivetError({
        group: "client",
        code: "http_error",
        message: `HTTP ${response.status}`,
        metadata: { status: response.status },
      });
    }
    return data;
  }
}

export class ActorHandle {
  constructor(client, name, key, { actorId = null, create = true } = {}) {
    this.client = client;
    this.name = name;
    this.key = key;
    this.actorId = actorId;
    this.createMissing = create;
  }

  params(withCreate = false) {
    if (this.actorId) return [["actor_id", this.actorId]];
    const params = this.key.map((part) => ["key", part]);
    if (withCreate && !this.createMissing) params.push(["create", "false"]);
    return params;
  }

  get path() {
    return `actors/${encodeURIComponent(this.name)}`;
  }

  /** Run an action over HTTP; resolves to its output. */
  async call(action, ...args) {
    const result = await this.client.request(
      "POST",
      `${this.path}/actions/${encodeURIComponent(action)}`,
      this.params(true),
      { args },
    );
    return result.output;
  }

  /** Create the actor if needed: {actor_id, created}. */
  getOrCreate(input = null) {
    return this.client.request("PUT", this.path, this.params(), { input });
  }

  /** Create the actor; rejects with actor/already_exists if it exists. */
  async create(input = null) {
    return (await this.client.request("POST", this.path, this.params(), { input })).actor_id;
  }

  /** Describe the actor: {actor_id, name, key, created_at}. */
  get() {
    return this.client.request("GET", this.path, this.params());
  }

  /** Send a message to the actor's queue: {status, response?}. */
  send(queue, body, { wait = false, timeout = null } = {}) {
    return this.client.request(
      "POST",
      `${this.path}/queue/${encodeURIComponent(queue)}`,
      this.params(),
      { body, wait, timeout },
    );
  }

  /**
   * Open a WebSocket connection (returns at once; `conn.ready` resolves on
   * the first `init`). Options: `since` (replay events after that seq),
   * `subscribe` ("*" for every event).
   */
  connect(params = null, options = {}) {
    return new Connection(this, params, options);
  }

  /**
   * Follow the actor's events over Server-Sent Events (no actions, no
   * connection state): `subscribe` is a list of names or "*", `since` the
   * seq to replay after. `events.on(name, fn)`, `events.onResync(fn)`,
   * `events.onError(fn)`, `events.lastSeq`, `events.close()`.
   */
  events({ subscribe = "*", since = null, onError } = {}) {
    const names = subscribe === "*" ? ["*"] : [].concat(subscribe);
    // The route creates no actor unless asked: as connect() would, by default.
    const params = [...this.params(), ["subscribe", names.join(",")]];
    if (!this.actorId) params.push(["create", String(this.createMissing)]);
    return new EventFollower(this.client, `${this.path}/events`, params, since, { onError });
  }
}

/**
 * One EventSource, kept open: the browser reconnects it after a dropped
 * network with `Last-Event-ID`; if the browser gives up (a server that was
 * down), it is opened again after a backoff, from the last id received.
 */
export class EventFollower {
  constructor(client, path, params, since, { onClose, onError } = {}) {
    // lastId: the id of the last message received (an offset, or an event seq).
    Object.assign(this, { client, path, params, lastId: since, closed: false });
    this._handlers = new Map();
    this._errorHandlers = onError ? [onError] : [];
    this._resyncHandlers = [];
    Object.assign(this, { _onClose: onClose, _attempt: 0, _timer: null });
    this._open();
  }

  get lastSeq() {
    return this.lastId;
  }

  /** Call `fn(...args)` for each event `name` ("message": a stream's values). */
  on(name, fn) {
    if (!this._handlers.has(name)) {
      this._handlers.set(name, new Set());
      if (this._source) this._listen(this._source, name);
    }
    this._handlers.get(name).add(fn);
    return () => this._handlers.get(name).delete(fn);
  }

  /** Call `fn(error)` for error notices and refused subscriptions. */
  onError(fn) {
    this._errorHandlers.push(fn);
  }

  /** Call `fn(error)` when events will not come (missed, log truncated). */
  onResync(fn) {
    this._resyncHandlers.push(fn);
  }

  close() {
    this.closed = true;
    clearTimeout(this._timer);
    if (this._source) this._source.close();
  }

  _open() {
    if (this.closed) return;
    const params = [...this.params];
    if (this.lastId !== null && this.lastId !== undefined) params.push(["since", String(this.lastId)]);
    const source = new EventSource(this.client.url(this.path, params), {
      withCredentials: this.client.credentials === "include",
    });
    this._source = source;
    for (const name of this._handlers.keys()) this._listen(source, name);
    source.addEventListener("open", () => { this._attempt = 0; });
    source.addEventListener("init", (event) => {
      if (source === this._source && event.lastEventId !== "") this.lastId = Number(event.lastEventId);
    });
    source.addEventListener("close", () => {
      this.close();
      if (this._onClose) this._onClose();
    });
    source.addEventListener("error", (event) => {
      if (event instanceof MessageEvent) {
        const error = new RivetError(JSON.parse(event.data));
        const handlers = RESYNC_CODES.has(error.qualifiedCode) ? this._resyncHandlers : [];
        for (const fn of [...handlers, ...this._errorHandlers]) fn(error);
      } else if (source.readyState === EventSource.CLOSED && !this.closed) {
        // Refused (an HTTP error) or given up: try again later, from lastId.
        this._timer = setTimeout(() => this._open(), backoff(this.client, this._attempt++));
      }
    });
  }

  _listen(source, name) {
    source.addEventListener(name, (event) => {
      if (source !== this._source || this.closed) return;
      if (event.lastEventId !== "") this.lastId = Number(event.lastEventId);
      const data = JSON.parse(event.data);
      for (const fn of [...this._handlers.get(name)]) {
        if (name === "message") fn(data);
        else fn(...data);
      }
    });
  }
}

export class Connection {
  constructor(actor, params = null, { since = null, subscribe = null } = {}) {
    this.actor = actor;
    this.params = params;
    this.subscribe = subscribe;
    this.status = "connecting";
    this.actorId = null;
    this.connectionId = null;
    /** Highest event seq seen; a reconnect resumes after it. */
    this.lastSeq = since;
    this.closeCode = null;
    /** The server's frame size limit (from init). */
    this.maxFrameBytes = DEFAULT_MAX_FRAME_BYTES;
    this._lastError = null;
    this._handlers = new Map();
    this._errorHandlers = new Set();
    this._resyncHandlers = new Set();
    this._statusHandlers = new Set();
    this._pending = new Map();
    this._outbox = [];
    this._nextId = 0;
    this._attempt = 0;
    this._closing = false;
    this._timer = null;
    this._everConnected = false;
    this.ready = new Promise((resolve, reject) => {
      this._ready = { resolve, reject };
    });
    this.ready.catch(() => {}); // a refusal also reaches onError
    this._open();
  }

  /** Call `fn(...args)` for each `event`; returns the unsubscribe function. */
  on(event, fn) {
    let handlers = this._handlers.get(event);
    if (!handlers) {
      handlers = new Set();
      this._handlers.set(event, handlers);
      this._send({ type: "subscribe", event });
    }
    handlers.add(fn);
    return () => {
      const current = this._handlers.get(event);
      if (!current || !current.delete(fn) || current.size) return;
      this._handlers.delete(event);
      this._send({ type: "unsubscribe", event });
    };
  }

  /** Call `fn(error)` for connection-level errors (refusal, truncated log...). */
  onError(fn) {
    this._errorHandlers.add(fn);
    return () => this._errorHandlers.delete(fn);
  }

  /**
   * Call `fn(error)` when events were lost for good (`actor/events_missed`,
   * `actor/event_log_truncated`): reload the state derived from events.
   * `error.metadata` says which seqs will not come (since < seq < oldest).
   */
  onResync(fn) {
    this._resyncHandlers.add(fn);
    return () => this._resyncHandlers.delete(fn);
  }

  /** Call `fn(status)` whenever `status` changes. */
  onStatus(fn) {
    this._statusHandlers.add(fn);
    return () => this._statusHandlers.delete(fn);
  }

  /** Run an action over the socket; actions run in the order sent. */
  call(action, ...args) {
    if (this.status === "disconnected") {
      return Promise.reject(this._lost("The connection is closed"));
    }
    const id = ++this._nextId;
    const data = JSON.stringify({ type: "action", id, name: action, args });
    const size = new TextEncoder().encode(data).length;
    if (size > this.maxFrameBytes) {
      // Refused here, at once: the server could not read the frame's id.
      return Promise.reject(
        new RivetError({
          group: "request",
          code: "too_large",
          message: `The frame is ${size} bytes; the limit is ${this.maxFrameBytes}`,
          metadata: { size, limit: this.maxFrameBytes },
        }),
      );
    }
    return new Promise((resolve, reject) => {
      this._pending.set(id, { resolve, reject });
      this._sendData(data, true);
    });
  }

  /** Close the connection for good (no reconnect). */
  close() {
    this._closing = true;
    clearTimeout(this._timer);
    if (this._ws) this._ws.close(1000);
    this._failPending(this._lost("The connection was closed"));
    this._setStatus("disconnected");
  }

  // -- internals -------------------------------------------------------------
  _url() {
    const params = this.actor.params(true);
    params.push(["encoding", "json"]);
    if (this.lastSeq !== null && this.lastSeq !== undefined) {
      params.push(["since", String(this.lastSeq)]);
    }
    if (this.subscribe) {
      const names = Array.isArray(this.subscribe) ? this.subscribe : [this.subscribe];
      params.push(["subscribe", names.join(",")]);
    }
    return this.actor.client.url(`${this.actor.path}/connect`, params, true);
  }

  _open() {
    const protocols = ["rivet"];
    if (this.params !== null && this.params !== undefined) {
      protocols.push("rivet_conn_params." + base64url(JSON.stringify(this.params)));
    }
    const ws = new WebSocket(this._url(), protocols);
    this._ws = ws;
    this._initDone = false;
    this._refusal = null;
    ws.onopen = () => {
      // Subscriptions first, then frames queued while (re)connecting; the
      // server handles them in order, after init.
      for (const event of this._handlers.keys()) {
        ws.send(JSON.stringify({ type: "subscribe", event }));
      }
      for (const frame of this._outbox) ws.send(frame);
      this._outbox = [];
    };
    ws.onmessage = (message) => {
      let frame;
      try {
        frame = JSON.parse(message.data);
      } catch {
        return;
      }
      this._dispatch(frame);
    };
    ws.onclose = (event) => this._onClose(ws, event.code);
  }

  _send(frame) {
    this._sendData(JSON.stringify(frame), frame.type === "action");
  }

  _sendData(data, isAction) {
    const ws = this._ws;
    if (ws && ws.readyState === WebSocket.OPEN) {
      ws.send(data);
    } else if (isAction) {
      this._outbox.push(data); // sent once the socket opens
    }
    // Subscriptions are resent from _handlers on every open.
  }

  _dispatch(frame) {
    switch (frame.type) {
      case "init":
        this._initDone = true;
        this._everConnected = true;
        this._attempt = 0;
        this.actorId = frame.actor_id;
        this.connectionId = frame.connection_id;
        if ((this.lastSeq === null || this.lastSeq === undefined) && Number.isInteger(frame.seq)) {
          this.lastSeq = frame.seq;
        }
        if (Number.isInteger(frame.max_frame_bytes)) this.maxFrameBytes = frame.max_frame_bytes;
        this._setStatus("connected");
        this._ready.resolve(this);
        break;
      case "action_response": {
        const pending = this._pending.get(frame.id);
        if (pending) {
          this._pending.delete(frame.id);
          pending.resolve(frame.output);
        }
        break;
      }
      case "event": {
        if (Number.isInteger(frame.seq)) {
          this.lastSeq = Math.max(this.lastSeq || 0, frame.seq);
        }
        const handlers = this._handlers.get(frame.name);
        if (!handlers) break;
        for (const fn of [...handlers]) {
          try {
            fn(...(frame.args || []));
          } catch (error) {
            console.error("rivet: event handler failed", error);
          }
        }
        break;
      }
      case "error": {
        const error = new RivetError(frame);
        if (frame.action_id !== undefined && frame.action_id !== null) {
          const pending = this._pending.get(frame.action_id);
          if (pending) {
            this._pending.delete(frame.action_id);
            pending.reject(error);
          }
          break;
        }
        if (!this._initDone) this._refusal = error;
        this._lastError = error;
        for (const fn of [...this._errorHandlers]) fn(error);
        if (RESYNC_CODES.has(error.qualifiedCode)) {
          for (const fn of [...this._resyncHandlers]) fn(error);
        }
        break;
      }
      default:
        break;
    }
  }

  _onClose(ws, code) {
    if (ws !== this._ws) return;
    this._ws = null;
    this.closeCode = code;
    // Calls not yet answered fail; frames of calls not yet sent are dropped
    // with them, so nothing runs after its promise was rejected.
    this._outbox = [];
    const cause = code === FRAME_CLOSE_CODE ? this._lastError : null;
    this._lastError = null;
    this._failPending(cause || this._lost(`The connection closed (code ${code})`));
    if (this._refusal && !this._everConnected) this._ready.reject(this._refusal);
    if (this._closing || FINAL_CLOSE_CODES.has(code)) {
      this._setStatus("disconnected");
      return;
    }
    this._setStatus("connecting");
    this._timer = setTimeout(() => this._open(), backoff(this.actor.client, this._attempt++));
  }

  _failPending(error) {
    for (const { reject } of this._pending.values()) reject(error);
    this._pending.clear();
  }

  _lost(message) {
    return new RivetError({ group: "client", code: "connection_lost", message });
  }

  _setStatus(status) {
    if (this.status === status) return;
    this.status = status;
    for (const fn of [...this._statusHandlers]) fn(status);
  }
}
