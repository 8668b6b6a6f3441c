"""Measure 9: ``optimizations.compile`` on one CPU process: compiled det-lite vs the same plain
loop compiled by hand (``torch.compile(model)``) vs the plain eager loop, MLP and CNN.

Three loops in lockstep in this process: after every det-lite training batch (``init(compile=
...)`` + ``Trainer.fit``, the model compiled by ``wrap_model``), one batch of the hand-compiled
``PlainLoop`` and one of the eager ``PlainLoop`` (same model, data, optimizer; see
``_trials``). Per repeat: the median over batches of each per-batch ratio, warm-up batches (which
hold the compilation) left out; reported: the median over repeats.

Rows per model: ``compile_<kind>_step`` (det-lite compiled / hand-compiled, goal <= 1.05) and
``compile_<kind>_vs_eager`` (det-lite compiled / eager loop; goal < 1.00 when the hand-compiled
loop beats the eager one in the same run, else reported). Compile time is reported apart, in
``compile_s`` (det-lite) and ``hand_compile_s`` (the hand-compiled loop): the first batch
compiled, alone in a fresh compile cache, less the same first batch run eagerly
(``_cold_compile_s``); timed repeats reset dynamo but keep torch's caches.
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

    def after_batch(self) -> None:
        t0 = time.perf_counter()
        self.hand.step()
        t1 = time.perf_counter()
        self.eager.step()
        self.spans.append((t0, t1, time.perf_counter()))

    def steps(self, warmup: int) -> Tuple[List[float], List[float], List[float]]:
        """Per batch after the warm-up: (det-lite, hand-compiled, eager) step times."""
        spans = self.spans[max(warmup, 1) - 1 :]
        ours = [nxt[0] - prev[2] for prev, nxt in zip(spans, spans[1:])]
        hand = [t1 - t0 for t0, t1, _ in spans[1:]]
        eager = [t2 - t1 for _, t1, t2 in spans[1:]]
        return ours, hand, eager


def _once(kind: str, width: int, batches: int, backend: str) -> _Lockstep3:
    """One lockstep run of the three loops."""
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

    det_lite_times(kind, batches, width=width, callbacks={"lockstep": Step()}, compile={"backend": backend})
    return lock


def _cold_compile_s(kind: str, width: int, backend: str) -> Tuple[float, float]:
    """Compile time of each side: its first batch with nothing compiled before, alone in a fresh
    compile cache (torch's ``fresh_cache``: an empty on-disk cache, in-memory code caches
    cleared), less the same first batch run eagerly. det-lite's runs from ``fit()`` to the end
    of its first batch, the hand loop's is its first step; each side twice, in ABBA order,
    averaged. torch's compiler is imported and used once before, so neither side pays for
    the imports."""
    import torch
    from _trials import PlainLoop, det_lite_times
    from torch._inductor.utils import fresh_cache

    def first_batch(compile: Any) -> float:  # noqa: A002
        start = time.perf_counter()
        return det_lite_times(kind, 1, width=width, compile=compile)[0] - start

    def first_step(compiled: bool) -> float:
        loop = PlainLoop(kind, width)
        if compiled:
            loop.model = torch.compile(loop.model, backend=backend)
        start = time.perf_counter()
        loop.step()
        return time.perf_counter() - start

    with fresh_cache():  # imports and one-time set-up of the compiler, paid by nobody below
        torch.compile(lambda x: (x * 2).sum(), backend=backend)(torch.ones(3, requires_grad=True)).backward()
    first_batch(None), first_step(False)  # eager warm-up: imports, allocator
    eager_det, eager_hand = first_batch(None), first_step(False)
    det_s: List[float] = []
    hand_s: List[float] = []
    for side in ("det", "hand", "hand", "det"):  # ABBA: whoever goes second may find more warmed up
        with fresh_cache():
            torch._dynamo.reset()
            if side == "det":
                det_s.append(first_batch({"backend": backend}) - eager_det)
            else:
                hand_s.append(first_step(True) - eager_hand)
    return statistics.mean(det_s), statistics.mean(hand_s)


def run(mode: str, repeats: Optional[int] = None, threads: int = 1) -> List[Row]:
    import torch

    torch.set_num_threads(threads)
    backend = "aot_eager" if mode == "smoke" else "inductor"
    rows: List[Row] = []
    for kind, width, batches, warmup, reps in SIZES[mode]:
        reps = repeats or reps
        name = f"compile_{kind}" if kind == "mlp" else f"compile_{kind}{width}"
        log(f"{name} ({backend}): compile time, then {reps} x {batches} lockstep batches of 3 loops")
        compile_s, hand_compile_s = _cold_compile_s(kind, width, backend)
        results = [_once(kind, width, batches, backend).steps(warmup) for _ in range(reps)]
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
