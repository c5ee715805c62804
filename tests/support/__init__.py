"""Helpers shared by every test folder: polling, the browser, database hygiene.

Import what you need from its module (``from tests.support.polling import
wait_for``); the real servers live in :mod:`tests.servers`.
"""
