"""What a handler's annotations say about its arguments and its result.

Two kinds of annotation (docs/types.md):

* **builtin** ones (``str``, ``int``, ``float``, ``bool``, ``bytes``,
  ``list``, ``dict``, ``None``, unions of them): a call is checked by the
  outer type of each argument (:func:`matches`), before any I/O, and
  nothing is converted -- they cost nothing;
* **any other** (a dataclass, ``TypedDict``, pydantic model, ``Enum``,
  ``Decimal``, ``datetime``...): :class:`HandlerTypes` converts the wire's
  values into the declared types before the handler runs
  (``request/invalid_args`` naming the path), and its result back into
  values of the domain.

Annotations are resolved when the class is defined, or, if they name
types defined later in the module, at the first call.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable
from typing import Any

from ..exceptions import InvalidArgs, InvalidOutput, RivetError
from ..typed import Shape, shape_of
from ..typed.shapes import describe as describe_hint
from ..typed.shapes import resolved_hints

__all__ = ["HandlerTypes", "describe", "matches", "mismatch", "positional"]

_PLAIN = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


class HandlerTypes:
    """The conversions of one action or queue handler: arguments in, result out.

    ``plain`` (no annotation needs converting) is the fast path: callers
    test it and skip the rest.
    """

    __slots__ = ("_function", "params", "plain", "resolved", "rest", "result")

    def __init__(self, function: Callable[..., Any]) -> None:
        self._function = function
        self.resolved = False
        self.plain = False
        # (name, shape) of each positional parameter after ``self, ctx``.
        self.params: tuple[tuple[str, Shape | None], ...] = ()
        # The shape of each extra argument (``*args: Item``).
        self.rest: Shape | None = None
        self.result: Shape | None = None
        try:
            self.resolve()
        except TypeError:
            pass  # a type defined later in the module: resolved at first use

    def resolve(self) -> None:
        """Read the annotations; ``TypeError`` if a name cannot be resolved."""
        function = self._function
        hints = resolved_hints(function)
        parameters = list(inspect.signature(function).parameters.values())[2:]
        self.params = tuple(
            (p.name, shape_of(hints.get(p.name, p.empty)))
            for p in parameters
            if p.kind in _PLAIN
        )
        self.rest = next(
            (
                shape_of(hints.get(p.name, p.empty))
                for p in parameters
                if p.kind == inspect.Parameter.VAR_POSITIONAL
            ),
            None,
        )
        self.result = shape_of(hints.get("return", inspect.Parameter.empty))
        self.plain = (
            self.rest is None
            and self.result is None
            and all(shape is None for _, shape in self.params)
        )
        self.resolved = True

    def shapes(self) -> list[Shape]:
        """Return every shape of the handler (the system checks build them)."""
        if not self.resolved:
            self.resolve()
        found = [shape for _, shape in self.params if shape is not None]
        return found + [s for s in (self.rest, self.result) if s is not None]

    def _shape(self, index: int) -> tuple[str, Shape | None]:
        if index < len(self.params):
            return self.params[index]
        return "*args", self.rest

    def load_args(self, args: Any, where: str = "args") -> Any:
        """Return the wire's ``args`` as the handler takes them.

        Raises ``request/invalid_args`` naming the path
        (``args[0].items[2].price``), the argument and the reason.
        """
        return self._convert(args, where, "load")

    def dump_args(self, args: Any) -> Any:
        """Return ``args`` given in this process as the wire carries them."""
        return self._convert(args, "args", "dump")

    def _convert(self, args: Any, where: str, way: str, single: bool = False) -> Any:
        if not self.resolved:
            self.resolve()
        if self.plain:
            return args
        converted = list(args)
        for index, value in enumerate(converted):
            name, shape = self._shape(index)
            if shape is not None:
                method = shape.load if way == "load" else shape.dump
                path = where if single else f"{where}[{index}]"
                converted[index] = _named(name, method, value, path)
        return converted

    def load_body(self, body: Any) -> Any:
        """Return a queue message's body as its handler takes it."""
        return self._convert([body], "body", "load", single=True)[0]

    def dump_body(self, body: Any) -> Any:
        """Return a queue message's body given in this process as stored."""
        return self._convert([body], "body", "dump", single=True)[0]

    def dump_result(self, output: Any, action: str) -> tuple[Any, Any]:
        """Return the handler's ``output`` as ``(domain value, typed value)``.

        A result that does not fit its annotation is ``actor/invalid_output``
        (the server's fault; the invocation rolls back).
        """
        assert self.result is not None
        try:
            return self.result.convert(output, "output", InvalidOutput)
        except InvalidOutput as exc:
            raise InvalidOutput(
                f"Action {action!r} returned a value that does not fit its "
                f"annotation {describe_hint(self.result.hint)}: {exc.message}",
                metadata={"action": action, **(exc.metadata or {})},
            ) from None


def _named(
    name: str,
    convert: Callable[[Any, str, type[RivetError]], Any],
    value: Any,
    where: str,
) -> Any:
    try:
        return convert(value, where, InvalidArgs)
    except InvalidArgs as exc:
        exc.metadata = {"argument": name, **(exc.metadata or {})}
        raise


# -- builtin annotations: checked by their outer type ---------------------------------
def positional(
    signature: inspect.Signature, hints: dict[str, Any]
) -> tuple[tuple[str, Any], ...] | None:
    """Return ``HandlerSpec.positional`` for ``signature``, or ``None``."""
    params = list(signature.parameters.values())
    if len(params) < 2 or any(
        p.kind not in _PLAIN or p.default is not inspect.Parameter.empty for p in params
    ):
        return None
    return tuple((p.name, hints.get(p.name)) for p in params[2:])


_SIMPLE_TYPES: dict[Any, tuple[type, ...]] = {
    str: (str,),
    bytes: (bytes,),
    bool: (bool,),
    int: (int,),
    float: (int, float),
    list: (list, tuple),
    dict: (dict,),
    type(None): (type(None),),
}


def matches(value: Any, hint: Any) -> bool:
    """Check ``value`` against simple builtin annotations; accept the rest."""
    if hint is Any or hint is inspect.Parameter.empty:
        return True
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(matches(value, arg) for arg in typing.get_args(hint))
    if origin is not None:
        hint = origin
    if hint is None:
        hint = type(None)
    allowed = _SIMPLE_TYPES.get(hint)
    if allowed is None:
        return True
    if hint in (int, float) and isinstance(value, bool):
        return False
    return isinstance(value, allowed)


def describe(hint: Any) -> str:
    """Name an annotation in a message (``int``, ``Item``)."""
    return getattr(hint, "__name__", None) or str(hint)


def mismatch(wire_name: str, name: str, hint: Any) -> InvalidArgs:
    """Return the error for an argument of the wrong builtin type."""
    return InvalidArgs(
        f"Argument {name!r} of {wire_name!r} must be {describe(hint)}",
        metadata={"argument": name},
    )
