"""Static-graph capture of the wrapped models with ``torch.compile`` (``optimizations.compile``).

``wrap_model`` compiles a model's ``forward`` in place (module, class, ``state_dict`` keys and
forward hooks stay: no ``_orig_mod.`` wrapper); AOTAutograd captures the backward with it, the
loss, ``train_batch`` and the optimizer step run eagerly. A graph is captured once per graph key
(mode, grad mode, autocast, batch size unless ``dynamic``); a retrace is
:class:`GraphChangedError`. The contract (trace once, ``retrace_every_iteration``):
docs/design.md, "Static graphs".
"""

from __future__ import annotations

import difflib
import re
import types
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from determined_lite._errors import ActionRequired, TrialCheckError
from determined_lite.config import CompileSettings

_ALIAS = re.compile(r"\w+ = L_\w+")  # a placeholder's alias line in an FX graph's code
_RECOMPILE = "Detected recompile when torch.compile stance is 'fail_on_recompile'"
GraphKey = Tuple[Any, ...]


class GraphChangedError(TrialCheckError, RuntimeError):
    """A compiled model's graph changed between iterations (the static-graph contract). What
    retraces may depend on the hyperparameters (a branch or a shape one of them decides): it
    ends its trial, not the search."""

    every_trial = False


class CompilerMissingError(ActionRequired, RuntimeError):
    """``optimizations.compile`` needs a compiler (inductor on CPU: a C++ toolchain) that is missing."""


def check_compiler(settings: CompileSettings, device: torch.device) -> None:
    """Fail before training when the backend cannot run here: an unknown backend name, or
    inductor on the CPU without a working C++ compiler (torch's own search: ``$CXX``, else g++)."""
    from torch import _dynamo

    backends = _dynamo.list_backends(exclude_tags=())
    if settings.backend not in backends:
        raise ValueError(
            f"optimizations.compile.backend: expected one of {', '.join(sorted(backends))}, "
            f"got {settings.backend!r}"
        )
    if settings.backend != "inductor" or device.type != "cpu":
        return
    from torch._inductor import cpp_builder

    try:
        cpp_builder.get_cpp_compiler()
    except Exception as e:  # torch raises InvalidCxxCompiler (or an OSError) when none runs
        raise CompilerMissingError(
            "optimizations.compile: backend 'inductor' on the CPU needs a C++ compiler, and none "
            f"runs here ($CXX, else g++: {type(e).__name__}); install one (e.g. apt-get install "
            "g++), or set optimizations.compile.backend: aot_eager, or enabled: false"
        ) from None


class _GraphCache:
    """The ``torch.compile`` backend of one model: records each graph dynamo captures, compiles
    a graph once with the real backend and hands the same compiled function back for a retrace
    that captured it again."""

    def __init__(self, settings: CompileSettings) -> None:
        if settings.backend == "inductor":
            # what torch.compile(backend="inductor", mode=..., dynamic=...) builds
            self._inner: Callable[..., Any] = torch._TorchCompileInductorWrapper(
                settings.mode, None, settings.dynamic
            )
        else:
            from torch import _dynamo

            self._inner = _dynamo.lookup_backend(settings.backend)
        self.captured: List[str] = []  # the signature of every graph traced, in order
        self.compiled: Dict[str, Callable[..., Any]] = {}

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        signature = _signature(gm, example_inputs)
        self.captured.append(signature)
        fn = self.compiled.get(signature)
        if fn is None:
            fn = self.compiled[signature] = self._inner(gm, example_inputs)
        return fn


def _signature(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> str:
    """The graph's code and its inputs' metadata: equal signatures compile to the same function."""
    inputs = []
    for x in example_inputs:
        if isinstance(x, torch.Tensor):
            inputs.append(f"{x.dtype} {x.device} {tuple(x.shape)} {x.stride()} grad={x.requires_grad}")
        else:
            inputs.append(repr(x))
    state = f"grad_enabled={torch.is_grad_enabled()}"
    return gm.code.strip() + "\n# inputs: " + "; ".join(inputs) + "\n# " + state


class CompiledForward:
    """What ``wrap_model`` puts in place of a model's ``forward``: the compiled forward under the
    static-graph contract (see the module docstring)."""

    def __init__(self, model: torch.nn.Module, name: str, settings: CompileSettings) -> None:
        self.name = name  # how errors name the model, e.g. "Net (context.models[0])"
        self.settings = settings
        self._model = model
        forward = _own_code(model)
        self._code = forward.__func__.__code__
        self.backend = _GraphCache(settings)
        self._compiled = torch.compile(
            forward, backend=self.backend, fullgraph=settings.fullgraph, dynamic=settings.dynamic
        )  # dynamic=False: a new shape is a new trace, never a silent switch to symbolic shapes
        self.graphs: Dict[GraphKey, Tuple[str, ...]] = {}  # what each key's first call captured

    def __deepcopy__(self, memo: Dict[int, Any]) -> Any:
        """A deep copy of the model (an EMA copy, say) runs eagerly: its own class's forward,
        never this model's graphs or parameters."""
        copy = memo.get(id(self._model))
        if copy is None:
            raise TypeError(
                f"optimizations.compile: the compiled forward of {self.name} cannot be copied alone"
            )
        return types.MethodType(type(copy).forward, copy)

    def key(self, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> GraphKey:
        """What legitimately needs its own graph (see the module docstring)."""
        batch: Tuple[int, ...] = ()
        if not self.settings.dynamic:
            if kwargs or not all(type(a) is torch.Tensor for a in args):  # noqa: E721 -- the common case fast
                batch = tuple(t.shape[0] for t in _tensors((args, kwargs)) if t.dim() > 0)
            else:
                batch = tuple(a.shape[0] for a in args if a.dim() > 0)
        autocast = (torch.is_autocast_enabled("cpu"), torch.is_autocast_enabled("cuda"))
        return (self._model.training, torch.is_grad_enabled(), autocast, batch)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        key = self.key(args, kwargs)
        first = self.graphs.get(key)
        if first is None:
            self._check_limit(key)
        start = len(self.backend.captured)
        if self.settings.retrace_every_iteration:
            _reset_code(self._code)  # trace again: the forward's Python runs this call
            out = self._compiled(*args, **kwargs)
        elif first is None:
            out = self._compiled(*args, **kwargs)
        else:
            try:
                out = _failing_on_recompile(self._compiled, args, kwargs)
            except RuntimeError as e:
                if _RECOMPILE not in str(e):
                    raise
                raise GraphChangedError(self._changed(key, _guard_failures(str(e)))) from None
        captured = tuple(self.backend.captured[start:])
        if first is None:
            self.graphs[key] = captured
        else:
            new = [g for g in captured if g not in first]
            if new:
                raise GraphChangedError(self._changed(key, _graph_diff(first, new[0])))
        return out

    def _check_limit(self, key: GraphKey) -> None:
        """Past torch's ``recompile_limit`` graphs of one function, torch would run it eagerly
        without a word: say so instead."""
        from torch._dynamo import config

        limit = int(getattr(config, "recompile_limit", getattr(config, "cache_size_limit", 8)))
        if len(self.graphs) >= limit:
            sizes = sorted({k[3] for k in self.graphs} | {key[3]})
            raise GraphChangedError(
                f"optimizations.compile: {self.name} needs more than {limit} graphs (torch's "
                f"recompile_limit), one per mode and batch size (batch sizes seen: {sizes}); "
                "set optimizations.compile.dynamic: true for batches of varying size"
            )

    def _changed(self, key: GraphKey, cause: str) -> str:
        mode = "training" if key[0] else "eval"
        retrace = "retrace_every_iteration: " if self.settings.retrace_every_iteration else "trace once: "
        return (
            f"optimizations.compile ({retrace}a changed graph is an error): the graph of "
            f"{self.name} in {mode} mode changed after its first iteration: {cause}. Keep Python "
            "branches, loop counts and input shapes the same every iteration (set "
            "optimizations.compile.dynamic: true for shapes that vary)"
        )


def _own_code(model: torch.nn.Module) -> Any:
    """``model.forward`` bound to a copy of its function with a code object of its own.

    torch keeps compiled graphs, their guards and the recompile limit per code object, which
    every instance of a class shares: another model of the class (or one from an earlier trial
    in this process) would use up this model's limit, and a retrace would drop its graphs."""
    forward = model.forward
    func = getattr(forward, "__func__", None)
    if not isinstance(func, types.FunctionType):
        raise TypeError(f"optimizations.compile: {type(model).__name__}.forward is not a Python method")
    own = types.FunctionType(
        func.__code__.replace(), func.__globals__, func.__name__, func.__defaults__, func.__closure__
    )
    own.__kwdefaults__ = func.__kwdefaults__
    own.__qualname__ = func.__qualname__
    return types.MethodType(own, model)


def _failing_on_recompile(fn: Callable[..., Any], args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    """``fn(*args, **kwargs)`` under ``torch.compiler.set_stance("fail_on_recompile")``.

    The public context manager builds and validates a stance object on every use (~25 us, a few
    percent of a small model's step); this switches torch's stance the way it does, with one
    stance object made once, and restores the stance that was current."""
    if not _STANCE:
        try:
            from torch._dynamo.eval_frame import DynamoStance, _set_stance

            _STANCE.append((DynamoStance("fail_on_recompile"), _set_stance))
        except (ImportError, TypeError):  # another torch: the public API
            _STANCE.append(None)
    switch = _STANCE[0]
    if switch is None:
        with torch.compiler.set_stance("fail_on_recompile"):
            return fn(*args, **kwargs)
    stance, set_stance = switch
    prior = set_stance(stance)
    try:
        return fn(*args, **kwargs)
    finally:
        set_stance(prior)


_STANCE: List[Any] = []  # (torch's fail_on_recompile stance, its switch), made on first use


def _reset_code(code: types.CodeType) -> None:
    """Drop torch's compiled entries for ``code`` and for the functions torch made to resume it
    after a graph break (they would pile up to the recompile limit, then run eagerly)."""
    from torch._C._dynamo.eval_frame import reset_code
    from torch._dynamo.resume_execution import ContinueExecutionCache

    reset_code(code)
    resumes = ContinueExecutionCache.cache[code] if code in ContinueExecutionCache.cache else {}
    for resume in list(resumes.values()):
        _reset_code(resume)


def _tensors(value: Any) -> List[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _guard_failures(message: str) -> str:
    """torch's guard failure lines from a fail_on_recompile error (the cause), on one line."""
    lines = [line.strip().lstrip("- ").strip() for line in message.splitlines()[1:]]
    reasons = []
    for line in lines:
        if not line or line.startswith("triggered by"):
            continue
        if line.startswith("User stack trace"):
            break  # the source line is already in the guard's text
        reasons.append(re.sub(r"^\d+/\d+: ", "", re.sub(r"\s+", " ", line)))
    # Graphs of other keys (eval mode, no_grad, another batch size) fail on what the key tells
    # apart: name only the guards that failed for a reason of this key's own.
    own = [r for r in reasons if not r.startswith("GLOBAL_STATE changed") and "mismatch at index 0" not in r]
    reasons = own or reasons
    if not reasons:
        return "a new trace was needed (" + message.splitlines()[0].split(". ", 1)[-1] + ")"
    return "guard failed: " + "; ".join(reasons)


def _graph_diff(first: Tuple[str, ...], new: str) -> str:
    """The first line where the retraced graph differs from the closest first-iteration graph."""
    base = max(first, key=lambda g: difflib.SequenceMatcher(None, g, new).ratio()) if first else ""
    changed = []
    for line in difflib.unified_diff(base.splitlines(), new.splitlines(), lineterm="", n=0):
        if line[:3] in ("+++", "---") or line[:1] not in ("+", "-"):
            continue
        text = line[1:].split(";")[0].strip()  # without the "x = None" clean-up
        if text.startswith("def ") or _ALIAS.fullmatch(text):
            continue  # inputs in another order: the operations say what changed
        changed.append((line[0] == "-", f"{'lacks' if line[0] == '-' else 'has'} {text!r}"))
    if not changed:
        return "the retraced graph differs in its inputs"
    return "the retraced graph " + min(changed, key=lambda c: c[0])[1]  # a new operation first


def compile_wrapped_model(
    model: torch.nn.Module, index: int, settings: CompileSettings, device: torch.device
) -> CompiledForward:
    """What ``wrap_model`` does under ``optimizations.compile``: check the compiler (before any
    training), then compile ``model.forward`` in place as ``context.models[index]``."""
    name = f"{type(model).__name__} (context.models[{index}])"
    from torch._dynamo.eval_frame import OptimizedModule

    if isinstance(model, OptimizedModule) or compiled_forward(model) is not None:
        raise ValueError(
            f"wrap_model(): {name} is already compiled; with optimizations.compile pass the "
            "module itself (det-lite compiles it)"
        )
    check_compiler(settings, device)
    compiled = CompiledForward(model, name, settings)
    model.forward = compiled
    return compiled


def strip_compile_prefix(state_dict: Dict[str, Any]) -> Dict[str, Any]:
    """A model state dict without the ``_orig_mod.`` prefix a hand-made ``torch.compile(model)``
    adds to every key (checkpoints from such runs load into the plain module)."""
    prefix = "_orig_mod."
    if not state_dict or not all(k.startswith(prefix) for k in state_dict):
        return state_dict
    return type(state_dict)((k[len(prefix) :], v) for k, v in state_dict.items())


def compiled_forward(model: torch.nn.Module) -> Optional[CompiledForward]:
    """The :class:`CompiledForward` that ``wrap_model`` put on ``model`` (or None)."""
    found = model.__dict__.get("forward")
    return found if isinstance(found, CompiledForward) else None
