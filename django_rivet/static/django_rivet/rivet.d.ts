// Types of rivet.js, the django-rivet browser client (docs/types.md).
//
// Untyped, every action takes and returns `unknown` values. Typed, with the
// registry `manage.py rivet_typescript` writes from your actor classes:
//
//   import { createClient } from "/static/django_rivet/rivet.js";
//   import type { RivetRegistry } from "./rivet-registry";
//   const client = createClient<RivetRegistry>("/rivet");
//   const total = await client.actor("cart", "c1").call("add", { sku: "a", price: "9.99" });
//
// and a call with a wrong argument type, or to an action that does not
// exist, fails to compile.

/** What the registry says of one actor class. */
export interface ActorTypes {
  actions: Record<string, { args: unknown[]; result: unknown }>;
  queues: Record<string, { body: unknown; response: unknown }>;
  events: Record<string, unknown[]>;
  state: unknown;
  connParams: unknown;
  input: unknown;
}

/** Actor classes by registered name. */
export type AnyRegistry = Record<string, ActorTypes>;

export type ActionName<A extends ActorTypes> = keyof A["actions"] & string;
export type ActionArgs<A extends ActorTypes, K extends ActionName<A>> = A["actions"][K]["args"];
export type ActionResult<A extends ActorTypes, K extends ActionName<A>> = A["actions"][K]["result"];
export type EventName<A extends ActorTypes> = keyof A["events"] & string;
export type QueueName<A extends ActorTypes> = keyof A["queues"] & string;

/** An error from the server ({group, code, message, metadata}) or the client. */
export declare class RivetError extends Error {
  constructor(fields?: { group?: string; code?: string; message?: string; metadata?: unknown });
  group: string;
  code: string;
  metadata: unknown;
  readonly qualifiedCode: string;
}

export interface ClientOptions {
  headers?: Record<string, string>;
  credentials?: RequestCredentials;
  reconnect?: { initialDelay?: number; maxDelay?: number };
}

export interface ActorOptions {
  actorId?: string | null;
  create?: boolean;
}

export interface ConnectOptions {
  since?: number | null;
  subscribe?: string | string[] | null;
}

export type ConnectionStatus = "connecting" | "connected" | "disconnected";

export declare function createClient<R extends AnyRegistry = AnyRegistry>(
  baseUrl: string,
  options?: ClientOptions,
): Client<R>;

export declare class Client<R extends AnyRegistry = AnyRegistry> {
  constructor(baseUrl: string, options?: ClientOptions);
  readonly baseUrl: URL;
  actor<N extends keyof R & string>(
    name: N,
    key?: string | readonly string[] | null,
    options?: ActorOptions,
  ): ActorHandle<R[N]>;
}

export declare class ActorHandle<A extends ActorTypes = ActorTypes> {
  readonly name: string;
  readonly key: string[];
  actorId: string | null;
  /** Run an action over HTTP; resolves to its output. */
  call<K extends ActionName<A>>(action: K, ...args: ActionArgs<A, K>): Promise<ActionResult<A, K>>;
  getOrCreate(input?: A["input"] | null): Promise<{ actor_id: string; created: boolean }>;
  create(input?: A["input"] | null): Promise<string>;
  get(): Promise<{ actor_id: string; name: string; key: string[]; created_at: string }>;
  send<Q extends QueueName<A>>(
    queue: Q,
    body: A["queues"][Q]["body"],
    options?: { wait?: boolean; timeout?: number | null },
  ): Promise<{ status: string; response?: A["queues"][Q]["response"] }>;
  connect(params?: A["connParams"] | null, options?: ConnectOptions): Connection<A>;
}

export declare class Connection<A extends ActorTypes = ActorTypes> {
  readonly actor: ActorHandle<A>;
  status: ConnectionStatus;
  actorId: string | null;
  connectionId: string | null;
  lastSeq: number | null;
  closeCode: number | null;
  maxFrameBytes: number;
  /** Resolves on the first init. */
  readonly ready: Promise<unknown>;
  on<E extends EventName<A>>(event: E, fn: (...args: A["events"][E]) => void): () => void;
  onError(fn: (error: RivetError) => void): () => void;
  onResync(fn: (error: RivetError) => void): () => void;
  onStatus(fn: (status: ConnectionStatus) => void): () => void;
  /** Run an action over the socket; actions run in the order sent. */
  call<K extends ActionName<A>>(action: K, ...args: ActionArgs<A, K>): Promise<ActionResult<A, K>>;
  close(): void;
}
