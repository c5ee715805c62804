"""The edges: HTTP views, the WebSocket consumer and connection lifecycle.

- :mod:`.http`: the HTTP routes of docs/protocol.md (decode, invoke, encode);
- :mod:`.consumer`: one WebSocket connection to an actor (docs/protocol.md), with
  ordered actions and exactly-once, in-order event delivery;
- :mod:`.connections`: the connection operations (connect, action,
  disconnect), the per-process heartbeat and the liveness sweep;
- :mod:`.parsing` and :mod:`.origins`: what every route reads from clients,
  and the browser Origin check.

The transport decodes, calls the actor runtime's ``invoke`` and encodes; it
holds no actor logic. It may import every layer below it (actors, the
queues of the scheduler, events, storage, foundation); nothing in the
package imports it except the URL and WebSocket routes and the app config.
"""
