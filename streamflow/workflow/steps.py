"""Step functions of a ``streamflow.App``: :class:`Step` (a registered step function),
:class:`StepInfo` and :func:`step_info` (what a running attempt knows about itself) and
:func:`step_of` (the registered step a function is). ``streamflow.workflow.app`` re-exports
them; the ``App`` registers steps with ``@app.step``.
"""

from __future__ import annotations

import asyncio
import inspect
import typing
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast, overload
from weakref import WeakKeyDictionary

from streamflow.core.admission import LimitClaim
from streamflow.core.errors import InvalidWorkflow
from streamflow.core.jsonvalue import JsonValue
from streamflow.core.retry import RetryPolicy
from streamflow.core.tokens import derive_hook_token
from streamflow.workflow.errors import NotAStep
from streamflow.workflow.flow_control import DeclaredLimits, LimitDeclarations
from streamflow.workflow.runtime import StepInvocation
from streamflow.workflow.typed import decode, encode

__all__ = [
    "LOCAL_STEP_TIMEOUT",
    "Step",
    "StepDecorator",
    "StepInfo",
    "signature_of",
    "step_info",
    "step_of",
]

A = TypeVar("A")
R = TypeVar("R")

LOCAL_STEP_TIMEOUT = 10.0
"""Seconds an attempt of a local step may take when its ``timeout`` is not given: it runs
where its run is decided, which waits for it (docs/semantics.md, *Local steps*)."""


@dataclass(frozen=True, slots=True)
class StepInfo:
    """What a running step attempt may know about itself (``streamflow.step_info()``)."""

    run_id: str
    """The run the step belongs to."""
    step_id: str
    """The step's stable id in the run."""
    step_name: str
    """The registered step's name."""
    attempt: int
    """1-based attempt; a redelivery after a crash repeats the same number."""
    idempotency_key: str
    """``flow:{run_id}:{step_id}``: the same for every attempt; give it to the service called."""
    _invocation: StepInvocation

    def hook_token(self, hook_id: str) -> str:
        """The token of hook ``hook_id`` of this run (``ctx.hook_token`` in the workflow gives the
        same): put it in the link this step sends, never in its output."""
        return derive_hook_token(self._invocation.hook_secret, self.run_id, hook_id)


_CURRENT: ContextVar[StepInfo | None] = ContextVar("streamflow_step_info", default=None)


def step_info() -> StepInfo:
    """The attempt running in this context; ``RuntimeError`` outside a step (a step function
    called directly, in a unit test, has none)."""
    info = _CURRENT.get()
    if info is None:
        raise RuntimeError("streamflow.step_info() is only available inside a running step")
    return info


def signature_of(fn: Callable[..., Any], skip: int) -> tuple[bool, Any, Any]:
    """Whether ``fn`` takes an input after its first ``skip`` parameters, that input's
    annotation and the return annotation (``Any`` where there is none)."""
    params = list(inspect.signature(fn).parameters.values())[skip:]
    if len(params) > 1:
        raise InvalidWorkflow(f"{fn.__qualname__} takes at most one input argument")
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:  # an annotation that does not resolve: say which
        raise InvalidWorkflow(
            f"the annotations of {fn.__qualname__} do not resolve: {exc}"
        ) from exc
    takes = bool(params)
    input_type = hints.get(params[0].name, Any) if takes else None
    output_type = hints.get("return", Any)
    if output_type is type(None):
        output_type = None
    return takes, input_type, output_type


class Step(Generic[A, R]):
    """A registered step function. Calling it calls the function (for unit tests); a workflow
    runs it durably with ``await ctx.step(step_id, step, arg)``."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str,
        retry: RetryPolicy | None,
        timeout: float | None,
        limits: DeclaredLimits | None = None,
        local: bool = False,
    ) -> None:
        if timeout is not None and timeout <= 0:
            raise InvalidWorkflow(f"step {name}: timeout must be positive, got {timeout}")
        if local and limits is not None:
            raise InvalidWorkflow(
                f"step {name}: a local step runs where its run is decided, at once: it takes "
                "no concurrency or rate limits"
            )
        self.fn = fn
        self.name = name
        self.retry = None if retry is None else retry.validate()
        self.local = local
        """Whether its attempts run where the run is decided (``@app.step(local=True)``)."""
        self.timeout = LOCAL_STEP_TIMEOUT if local and timeout is None else timeout
        self.limits = limits
        """The step's ``concurrency=`` and ``rate_limit=`` declarations (``None``: none)."""
        self.takes_input, self.input_type, self.output_type = signature_of(fn, 0)
        self.is_async = inspect.iscoroutinefunction(fn)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Step({self.name!r})"

    def claims(self, input: JsonValue) -> tuple[LimitClaim, ...]:
        """The limit claims an attempt of this step with JSON ``input`` makes: ``input`` decoded
        to the step's input annotation (``SerializationError`` when it does not fit), then each
        declared limit's key function called on it (``InvalidLimitKey`` when one fails); ``()``
        when the step declares no limits."""
        if self.limits is None:
            return ()
        value = (
            decode(input, self.input_type, f"step {self.name} input") if self.takes_input else None
        )
        return self.limits.claims(value)

    async def run(self, invocation: StepInvocation) -> JsonValue:
        """One attempt: decode the input, call the function (a plain ``def`` on a thread), bound
        by ``timeout``, and encode what it returns."""
        args: tuple[Any, ...] = ()
        if self.takes_input:
            args = (decode(invocation.input, self.input_type, f"step {invocation.step_id} input"),)
        info = StepInfo(
            run_id=invocation.run_id,
            step_id=invocation.step_id,
            step_name=invocation.step_name,
            attempt=invocation.attempt,
            idempotency_key=invocation.idempotency_key,
            _invocation=invocation,
        )
        token = _CURRENT.set(info)
        try:
            call: Coroutine[Any, Any, Any] = (
                self.fn(*args) if self.is_async else asyncio.to_thread(self.fn, *args)
            )
            if self.timeout is None:
                result = await call
            else:
                try:
                    result = await asyncio.wait_for(call, self.timeout)
                except TimeoutError:
                    raise TimeoutError(
                        f"step {invocation.step_id} ({self.name}) did not finish within "
                        f"{self.timeout:g}s"
                    ) from None
        finally:
            _CURRENT.reset(token)
        return encode(result, self.output_type, f"step {invocation.step_id} output")


_STEPS: WeakKeyDictionary[Callable[..., Any], Step[Any, Any]] = WeakKeyDictionary()


def step_of(fn: object) -> Step[Any, Any]:
    """The registered step ``fn`` is (a :class:`Step`, or a function given to ``app.step``)."""
    if isinstance(fn, Step):
        return fn
    try:
        return _STEPS[cast(Callable[..., Any], fn)]
    except (KeyError, TypeError):
        pass
    name = getattr(fn, "__qualname__", repr(fn))
    raise NotAStep(f"{name} is not a registered step: decorate it with @app.step")


def remember_step(step: Step[Any, Any]) -> None:
    """Make :func:`step_of` answer ``step`` for its function (what ``@app.step`` registers)."""
    _STEPS[step.fn] = step


class StepDecorator:
    """``@app.step(name=..., retry=..., timeout=..., concurrency=..., rate_limit=...,
    local=...)``: builds the :class:`Step` and hands it to ``register``."""

    def __init__(
        self,
        register: Callable[[Step[Any, Any]], None],
        name: str | None,
        retry: RetryPolicy | None,
        timeout: float | None,
        limits: tuple[LimitDeclarations, LimitDeclarations] = (None, None),
        *,
        local: bool = False,
    ) -> None:
        self._register = register
        self._name = name
        self._retry = retry
        self._timeout = timeout
        self._limits = limits
        self._local = local

    @overload
    def __call__(self, fn: Callable[[], Coroutine[Any, Any, R]], /) -> Step[None, R]: ...

    @overload
    def __call__(self, fn: Callable[[A], Coroutine[Any, Any, R]], /) -> Step[A, R]: ...

    @overload
    def __call__(self, fn: Callable[[], R], /) -> Step[None, R]: ...

    @overload
    def __call__(self, fn: Callable[[A], R], /) -> Step[A, R]: ...

    def __call__(self, fn: Callable[..., Any], /) -> Step[Any, Any]:
        name = self._name or fn.__name__
        step: Step[Any, Any] = Step(
            fn,
            name=name,
            retry=self._retry,
            timeout=self._timeout,
            limits=DeclaredLimits.of(f"step {name}", *self._limits),
            local=self._local,
        )
        self._register(step)
        return step
