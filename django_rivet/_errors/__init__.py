"""The coded errors of :mod:`django_rivet.exceptions`, defined by ``group``.

``base`` holds :class:`RivetError` and the ``rivet`` and ``user`` groups;
``actor`` the ``actor`` and ``queue`` groups; ``request`` and ``workflow``
theirs: a group's codes are read in one file, so none is given twice.
Import every one of them from :mod:`django_rivet.exceptions`, their one
public home (which their ``__module__`` names).
"""
