"""Editing an actor's state and KV entries in the admin, as invocations.

An operator corrects a record the way the actor itself would change it:
each edit is an invocation (:class:`EditState`, :class:`EditKV`) through
the one invocation path -- under the actor's lock, one at a time with its
other work, the value domain and ``MAX_STATE_BYTES`` checked before the
commit, the version bumped (the processes holding the state read it
again), no event broadcast, no ``on_auth`` (the admin's permissions
decide: ``change_actor``, ``change_actorkv``, ``add_actorkv``,
``delete_actorkv``). The admin's change form runs it while validating, so
whatever refuses the value -- the domain, the state's kind, its size, a
concurrent change, the actor's ``on_state_change`` -- is a form error
naming it, and the admin's history (``LogEntry``) records what changed.

Values are edited as JSON, with tagged forms for what JSON has no type
for, so they come back as they were: ``{"$bytes": "<base64>"}``,
``{"$datetime": "<ISO 8601>"}``, ``{"$uuid": "<uuid>"}``.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django import forms
from django.core.exceptions import ValidationError
from django.http import HttpRequest

from ..actors.calls import Origin
from ..actors.definition import Actor
from ..actors.rows import ActorRef
from ..actors.spine import invoke
from ..domain import check_value
from ..encoding import cbor_loads
from ..exceptions import InvalidValue, RivetError

if TYPE_CHECKING:
    from ..actors.invocation import Invocation

__all__ = [
    "DELETE",
    "ActorStateForm",
    "KVEntryForm",
    "EditKV",
    "EditState",
    "from_editable",
    "kind_of",
    "run_edit",
    "to_editable",
    "value_field",
]

_TAGS = ("$bytes", "$datetime", "$uuid")
#: :class:`EditKV`'s value that deletes the key.
DELETE: Any = object()


# -- values as editable JSON -----------------------------------------------------
def to_editable(value: Any) -> Any:
    """Return ``value`` as JSON-able data, tagging what JSON cannot hold."""
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, uuid.UUID):
        return {"$uuid": str(value)}
    if isinstance(value, dict):
        return {key: to_editable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [to_editable(item) for item in value]
    return value


def from_editable(value: Any, path: str = "value") -> Any:
    """Read :func:`to_editable`'s form back; raise ``ValueError`` naming a bad tag."""
    if isinstance(value, dict):
        if len(value) == 1:
            ((tag, text),) = value.items()
            if tag in _TAGS:
                return _untag(tag, text, path)
        return {
            key: from_editable(item, f"{path}.{key}") for key, item in value.items()
        }
    if isinstance(value, list):
        return [from_editable(item, f"{path}[{i}]") for i, item in enumerate(value)]
    return value


def _untag(tag: str, text: Any, path: str) -> Any:
    if not isinstance(text, str):
        raise ValueError(f"{path}: {tag} takes a string")
    try:
        if tag == "$bytes":
            return base64.b64decode(text, validate=True)
        if tag == "$datetime":
            return datetime.fromisoformat(text)
        return uuid.UUID(text)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"{path}: not a valid {tag[1:]}: {exc}") from exc


def kind_of(value: Any) -> str:
    """Name the JSON kind of ``value`` (what the state's kind is checked by)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "map"
    if isinstance(value, list | tuple):
        return "list"
    return type(value).__name__


def value_field(label: str, help_text: str) -> forms.CharField:
    """A JSON text area for a value."""
    return forms.CharField(
        label=label,
        widget=forms.Textarea(
            attrs={"rows": 16, "cols": 100, "class": "vLargeTextField"}
        ),
        help_text=help_text,
    )


def parse_value(text: str, where: str) -> Any:
    """Parse an edited value (JSON, tags, the domain); raise ``ValidationError``."""
    try:
        value = from_editable(json.loads(text), where)
    except ValueError as exc:  # json.JSONDecodeError is one
        raise ValidationError(f"Not valid JSON: {exc}") from exc
    try:
        check_value(value, where)
    except InvalidValue as exc:
        raise ValidationError(f"Outside the value domain: {exc.message}") from exc
    return value


def show(value: Any) -> str:
    """Render a value as the edit form shows it."""
    return json.dumps(to_editable(value), indent=2, ensure_ascii=False)


# -- the edits, as invocations ---------------------------------------------------------
class _Edit:
    """An admin edit: an operation of the spine that asks no ``on_auth``
    (the admin's permissions decide) and checks nothing before I/O (the
    form checked the value)."""

    label: str | None = "admin edit"
    kind = "admin"
    auth = None

    def prepare(self, definition: type[Actor]) -> None:
        """Nothing to check before I/O."""


@dataclass(slots=True)
class EditState(_Edit):
    """Replace the actor's state, if it is still at ``version``.

    Its kind (map, list...) must stay the kind it is; the new state is
    written as any invocation's is (``on_state_change`` runs, the version
    moves, ``MAX_STATE_BYTES`` holds).
    """

    state: Any
    version: int

    def run(self, invocation: Invocation) -> int:
        """Set the state; return the version it replaced."""
        current = invocation.row.version
        if current != self.version:
            raise ValidationError(
                f"The state changed since this page was opened (version "
                f"{self.version}, now {current}): reload it and edit again"
            )
        before = invocation.state
        if before is not None and kind_of(before) != kind_of(self.state):
            raise ValidationError(
                f"The state is a {kind_of(before)}; it cannot become a "
                f"{kind_of(self.state)}"
            )
        invocation.state = self.state
        return current


@dataclass(slots=True)
class EditKV(_Edit):
    """Write (or, with :data:`DELETE`, remove) one KV entry of the actor."""

    key: bytes
    value: Any

    def run(self, invocation: Invocation) -> None:
        """Put or delete, with the KV store's own limits."""
        if self.value is DELETE:
            invocation.ctx.kv.delete(self.key)
        else:
            invocation.ctx.kv.put(self.key, self.value)


def run_edit(request: HttpRequest, actor_id: Any, operation: Any) -> Any:
    """Run an edit as an invocation; raise ``ValidationError`` if it is refused."""
    origin = Origin(transport="admin", user=getattr(request, "user", None))
    try:
        return invoke(ActorRef.by_id(actor_id), operation, origin)
    except RivetError as exc:
        raise ValidationError(f"{exc.message} ({exc.qualified_code})") from exc
    except (TypeError, ValueError) as exc:
        raise ValidationError(str(exc)) from exc


# -- the forms -------------------------------------------------------------------------
class ActorStateForm(forms.ModelForm):  # type: ignore[type-arg]
    """The actor's change form: its state as JSON, edited as an invocation."""

    state_json = value_field(
        "state",
        'JSON. Bytes, datetimes and UUIDs are written {"$bytes": "<base64>"}, '
        '{"$datetime": "<ISO 8601>"}, {"$uuid": "..."}. Saving runs an '
        "invocation: the actor's lock, the value domain and MAX_STATE_BYTES "
        "are checked, and the change is logged in the history.",
    )
    edited_version = forms.IntegerField(widget=forms.HiddenInput)

    #: Set by the admin for each request (:meth:`ActorAdmin.get_form`).
    request: HttpRequest | None = None

    class Meta:
        fields: list[str] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.before: Any = None
        self.edited = False
        if self.instance.pk is not None:
            self.before = self.instance.decoded_state()
            self.fields["state_json"].initial = show(self.before)
            self.fields["edited_version"].initial = self.instance.version

    def clean(self) -> dict[str, Any]:
        """Check the value, then edit the state in an invocation."""
        data = super().clean() or {}
        text, version = data.get("state_json"), data.get("edited_version")
        if text is None or version is None or self.errors:
            return data
        state = parse_value(text, "state")
        if state == self.before and version == self.instance.version:
            return data  # nothing to change
        assert self.request is not None
        run_edit(self.request, self.instance.pk, EditState(state, version))
        data["state"] = state
        self.edited = True
        return data


class KVEntryForm(forms.ModelForm):  # type: ignore[type-arg]
    """A KV entry's form: a key (when adding) and a value, written as an invocation."""

    key_text = forms.CharField(
        label="key",
        max_length=2048,
        help_text="UTF-8 text (entries with binary keys are edited, not added, here)",
    )
    value_json = value_field(
        "value",
        "JSON, with the tags of the state form; saved through an invocation of "
        "the actor (its lock, the KV limits).",
    )

    request: HttpRequest | None = None

    class Meta:
        fields = ["actor"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.edited = False
        if self.instance.pk is not None:
            del self.fields["key_text"]
            try:
                value = decoded(self.instance.value)
            except Exception:
                field = self.fields["value_json"]
                field.disabled = True
                field.help_text = "Not CBOR (written with codec='raw'): not editable."
            else:
                self.fields["value_json"].initial = show(value)

    def clean(self) -> dict[str, Any]:
        """Check the value, then write the entry in an invocation."""
        data = super().clean() or {}
        text = data.get("value_json")
        if text is None or self.errors or self.fields["value_json"].disabled:
            return data
        value = parse_value(text, "value")
        if self.instance.pk is not None:
            key, actor_id = bytes(self.instance.key), self.instance.actor_id
            if value == decoded(self.instance.value):
                return data
        else:
            key = str(data.get("key_text", "")).encode("utf-8")
            actor = data.get("actor")
            if actor is None:
                return data
            actor_id = actor.pk
        assert self.request is not None
        run_edit(self.request, actor_id, EditKV(key, value))
        self.edited = True
        return data


def decoded(data: Any) -> Any:
    """Decode a stored CBOR value."""
    return cbor_loads(bytes(data))
