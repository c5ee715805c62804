"""What the tests share: helpers, real servers, the apps' ASGI and URL modules.

Import what you need from its module (``from tests.support.polling import
wait_for``): polling and the browser launcher, the real servers on loopback
(:mod:`tests.support.servers`, :mod:`tests.support.cluster`), the test
project's ``asgi``, ``urls`` and Celery app, and the generators and clients
of the hostile-input, load and RivetKit tests. The settings modules are in
:mod:`tests.settings`.
"""
