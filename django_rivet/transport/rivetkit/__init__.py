"""Serve the official RivetKit client (``rivetkit`` on npm) unchanged.

A second flavour of django-rivet's wire protocol, next to its own
(docs/protocol.md, unchanged): the endpoints, encodings (JSON, CBOR, BARE)
and WebSocket frames ``rivetkit`` 2.3.x speaks, so
``createClient("http://host/rivet")`` and ``@rivetkit/react``'s hooks talk
to Django actors. Every call goes through
the same invocation spine as the own protocol. See docs/rivetkit-client.md.

Modules: :mod:`.bare` (the BARE codec), :mod:`.values` (the client's value
conventions), :mod:`.protocol` (messages in each encoding),
:mod:`.addressing` (keys and gateway targets), :mod:`.cors`,
:mod:`.manager` (the REST API), :mod:`.http` (the gateway),
:mod:`.consumer` (WebSocket), :mod:`.operations` (the few operations it
adds to the spine's), :mod:`.urls`. Nothing below the
transport layer imports this package.
"""
