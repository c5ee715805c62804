"""Typed workflow values: a workflow's input and output, a step's result.

A workflow function's ``input`` annotation and return annotation, and a
step function's return annotation, declare types (a dataclass, a pydantic
model, ``Decimal``... docs/types.md): what is recorded stays in the value
domain, and the code gets the declared type back -- on the first run and
on every replay alike. Unannotated functions (lambdas) and builtin
annotations cost a look at ``__annotations__``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import Any

from ..exceptions import InvalidValue, RivetError
from ..typed import Shape, returned_shape, shape_of
from ..typed.shapes import resolved_hints
from .errors import StepOutputError
from .scope import Scope
from .steps import StepOptions, run_step, try_step
from .values import StepResult

__all__ = [
    "WorkflowShapes",
    "dumping",
    "run_typed_step",
    "stepper",
    "try_typed_step",
    "workflow_shapes",
]


class WorkflowShapes:
    """The shapes of a workflow function's ``input`` and its result."""

    __slots__ = ("input", "output")

    def __init__(self, input: Shape | None, output: Shape | None) -> None:
        self.input = input
        self.output = output

    def load_input(self, value: Any) -> Any:
        """Return the stored input as the function takes it."""
        if self.input is None:
            return value
        return self.input.load(value, "input", InvalidValue)

    def dump_input(self, value: Any, error: type[RivetError] = InvalidValue) -> Any:
        """Return an input given in this process as stored; check it now."""
        if self.input is None:
            return value
        domain, _ = self.input.convert(value, "input", error)
        return domain

    def dump_output(self, value: Any) -> Any:
        """Return the function's result as stored."""
        if self.output is None:
            return value
        return self.output.dump(value, "output", StepOutputError)

    def load_output(self, value: Any) -> Any:
        """Return the stored output as the function's return annotation."""
        if self.output is None:
            return value
        return self.output.load(value, "output", InvalidValue)


_PLAIN = WorkflowShapes(None, None)
_CACHE: dict[Any, WorkflowShapes] = {}


def workflow_shapes(fn: Callable[..., Any]) -> WorkflowShapes:
    """Return the shapes of ``fn(ctx, input) -> output`` (cached per function)."""
    fn = getattr(fn, "fn", fn)  # a WorkflowDefinition
    key = getattr(fn, "__code__", None)
    if key is None or not getattr(fn, "__annotations__", None):
        return _PLAIN
    found = _CACHE.get(key)
    if found is not None:
        return found
    hints = resolved_hints(fn)
    names = list(inspect.signature(fn).parameters)
    input_hint = hints.get(names[1]) if len(names) > 1 else None
    shapes = WorkflowShapes(shape_of(input_hint), shape_of(hints.get("return")))
    if shapes.input is None and shapes.output is None:
        shapes = _PLAIN
    _CACHE[key] = shapes
    return shapes


def dumping(fn: Callable[[], Any], shape: Shape, name: str) -> Callable[[], Any]:
    """Wrap a step function so its result is recorded as a value of the domain."""
    what = f'Output of step "{name}"'

    def dump(value: Any) -> Any:
        return shape.dump(value, what, StepOutputError)

    if inspect.iscoroutinefunction(fn):

        async def dumped_async() -> Any:
            return dump(await fn())

        return dumped_async

    def dumped() -> Any:
        return dump(fn())

    return dumped


def run_typed_step(
    scope: Scope, name: str, fn: Callable[[], Any], options: StepOptions, shape: Shape
) -> Coroutine[Any, Any, Any]:
    """``run_step`` for a step function with a return annotation."""

    async def run() -> Any:
        output = await run_step(scope, name, dumping(fn, shape, name), options)
        return shape.load(output, f'Output of step "{name}"', InvalidValue)

    return run()


def try_typed_step(
    scope: Scope, name: str, fn: Callable[[], Any], options: StepOptions, shape: Shape
) -> Coroutine[Any, Any, StepResult[Any]]:
    """``try_step`` for a step function with a return annotation."""

    async def run() -> StepResult[Any]:
        result = await try_step(scope, name, dumping(fn, shape, name), options)
        if not result.ok:
            return result
        value = shape.load(result.value, f'Output of step "{name}"', InvalidValue)
        return StepResult(True, value, None)

    return run()


def stepper(
    fn: Callable[[], Any], plain: Callable[..., Any], typed: Callable[..., Any]
) -> Callable[..., Any]:
    """Return ``plain`` for a step function without a shape, else ``typed`` bound
    to its shape (``run_step``/``run_typed_step``, ``try_step``/``try_typed_step``).
    """
    shape = returned_shape(fn)
    if shape is None:
        return plain
    return functools.partial(_with_shape, typed, shape)


def _with_shape(
    typed: Callable[..., Any],
    shape: Shape,
    scope: Scope,
    name: str,
    fn: Callable[[], Any],
    options: StepOptions,
) -> Any:
    return typed(scope, name, fn, options, shape)
