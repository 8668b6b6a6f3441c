"""Measure 8: ``optimizations.compile`` on one CPU process: compiled det-lite vs the same plain
loop compiled by hand (``torch.compile(model)``) vs the plain eager loop, MLP and CNN.

Three loops in lockstep in this process: after every det-lite training batch (``init(compile=
...)`` + ``Trainer.fit``, the model compiled by ``wrap_model``), one batch of the hand-compiled
``PlainLoop`` and one of the eager ``PlainLoop`` (same model, data, optimizer; see
``_trials``). Per repeat: the median over batches of each per-batch ratio, warm-up batches (which
hold the compilation) left out; reported: the median over repeats.

Rows per model: ``compile_<kind>_step`` (det-lite compiled / hand-compiled, goal <= 1.05) and
``compile_<kind>_vs_eager`` (det-lite compiled / eager loop; goal < 1.00 when the hand-compiled
loop beats the eager one in the same run, else reported). Compile time is reported apart, in
``compile_s`` (det-lite: ``fit()`` to the end of the first batch, data loading and set-up
included: the user's wait) and ``hand_compile_s`` (the hand loop's first step), both measured
once per model with torch's on-disk compile caches off and ``torch._dynamo.reset()`` before;
timed repeats reset dynamo too but keep the caches.
Backend: inductor (C++ on the CPU); ``--smoke`` uses aot_eager (no C++ build; timings meaningless).
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Dict, List, Optional, Tuple

from _common import Row, log, ratio_row

GOAL_VS_HAND = 1.05
# mode -> [(kind, cnn width, batches per repeat, warm-up batches, repeats)]
SIZES: Dict[str, List[Tuple[str, int, int, int, int]]] = {
    "smoke": [("mlp", 32, 20, 5, 1)],
    "quick": [("mlp", 32, 400, 30, 3), ("cnn", 16, 40, 8, 2)],
    "full": [("mlp", 32, 1500, 50, 5), ("cnn", 32, 150, 15, 3)],
}


class _Lockstep3:
    """After every det-lite batch: one hand-compiled batch, then one eager batch, timestamped."""

    def __init__(self, hand: Any, eager: Any) -> None:
        self.hand, self.eager = hand, eager
        self.spans: List[Tuple[float, float, float]] = []
        self.first_step_s: Optional[float] = None  # the hand loop's first step: its compilation

    def after_batch(self) -> None:
        t0 = time.perf_counter()
        self.hand.step()
        t1 = time.perf_counter()
        self.eager.step()
        self.spans.append((t0, t1, time.perf_counter()))
        if self.first_step_s is None:
            self.first_step_s = t1 - t0

    def steps(self, warmup: int) -> Tuple[List[float], List[float], List[float]]:
        """Per batch after the warm-up: (det-lite, hand-compiled, eager) step times."""
        spans = self.spans[max(warmup, 1) - 1 :]
        ours = [nxt[0] - prev[2] for prev, nxt in zip(spans, spans[1:])]
        hand = [t1 - t0 for t0, t1, _ in spans[1:]]
        eager = [t2 - t1 for _, t1, t2 in spans[1:]]
        return ours, hand, eager


def _once(kind: str, width: int, batches: int, backend: str) -> Tuple[_Lockstep3, float]:
    """One lockstep run; also returns det-lite's time from ``fit()`` to the end of batch 0."""
    import torch
    from _trials import PlainLoop, det_lite_times

    from determined_lite import pytorch as det

    torch._dynamo.reset()  # each run compiles its own graphs (and stays under the recompile limit)
    hand = PlainLoop(kind, width)
    hand.model = torch.compile(hand.model, backend=backend)
    lock = _Lockstep3(hand, PlainLoop(kind, width))

    class Step(det.PyTorchCallback):
        def on_train_batch_end(self, metrics: Dict[str, Any], batch_idx: int) -> None:
            lock.after_batch()

    start = time.perf_counter()
    times = det_lite_times(
        kind, batches, width=width, callbacks={"lockstep": Step()}, compile={"backend": backend}
    )
    return lock, times[0] - start


def _caches(enabled: bool) -> None:
    """torch's on-disk compile caches (inductor's FX graph cache, AOTAutograd's cache)."""
    from torch._functorch import config as functorch_config
    from torch._inductor import config as inductor_config

    inductor_config.fx_graph_cache = enabled
    functorch_config.enable_autograd_cache = enabled


def run(mode: str, repeats: Optional[int] = None, threads: int = 1) -> List[Row]:
    import torch

    torch.set_num_threads(threads)
    backend = "aot_eager" if mode == "smoke" else "inductor"
    rows: List[Row] = []
    for kind, width, batches, warmup, reps in SIZES[mode]:
        reps = repeats or reps
        name = f"compile_{kind}" if kind == "mlp" else f"compile_{kind}{width}"
        log(f"{name} ({backend}): compile time, then {reps} x {batches} lockstep batches of 3 loops")
        _caches(False)
        try:
            lock, compile_s = _once(kind, width, warmup + 3, backend)  # cold: the compile times
        finally:
            _caches(True)
        hand_compile_s = lock.first_step_s
        results = [_once(kind, width, batches, backend)[0].steps(warmup) for _ in range(reps)]
        ours = [statistics.median(r[0]) for r in results]
        hand = [statistics.median(r[1]) for r in results]
        eager = [statistics.median(r[2]) for r in results]
        vs_hand = [statistics.median(o / h for o, h in zip(r[0], r[1])) for r in results]
        vs_eager = [statistics.median(o / e for o, e in zip(r[0], r[2])) for r in results]
        hand_vs_eager = statistics.median(
            statistics.median(h / e for h, e in zip(r[1], r[2])) for r in results
        )
        common = {
            "backend": backend,
            "threads": threads,
            "batches": batches,
            "compile_s": compile_s,
            "hand_compile_s": hand_compile_s,
            "hand_vs_eager": hand_vs_eager,
        }
        note = f"compile {compile_s:.1f} s (hand {hand_compile_s:.1f} s); hand/eager {hand_vs_eager:.3f}"
        rows.append(ratio_row(f"{name}_step", ours, hand, GOAL_VS_HAND, ratios=vs_hand, note=note, **common))
        # Faster than eager wherever hand compilation is: the goal applies when it was.
        goal = 1.0 if hand_vs_eager < 1.0 else None
        rows.append(
            ratio_row(
                f"{name}_vs_eager",
                ours,
                eager,
                goal,
                ratios=vs_eager,
                note="baseline: eager plain loop",
                **common,
            )  # type: ignore[arg-type]
        )
    return rows
