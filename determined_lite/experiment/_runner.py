"""Run an experiment: the searcher decides, the launcher trains, the store remembers.

One runner process per active experiment (the foreground ``det-lite experiment create`` or its
``--detach``-ed twin). Its collaborators: the search (``_search.py``: searcher, requests, queue,
state saved after every event, so ``activate`` resumes a paused or killed experiment exactly
where it stood), the runs (``_runs.py``: start while slots and ``max_concurrent_trials`` allow,
poll, restart from the latest checkpoint, ASHA promotions resumed), their questions
(``_next_ops.py``) and the endings (``_endings.py``: pause, kill, summary). The runner's loop
answers pause/kill requests and signals, and waits for the next event (``_wakeup.py``).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any, Optional, TextIO

from determined_lite._errors import ActionRequired
from determined_lite.config import ExperimentSettings, SearcherSettings, searched_paths
from determined_lite.experiment._endings import Endings
from determined_lite.experiment._hangup import detach_output, pausing_line
from determined_lite.experiment._lock import RunnerLock
from determined_lite.experiment._next_ops import answer_next_ops, wait_s
from determined_lite.experiment._progress import Progress
from determined_lite.experiment._runs import Runs, StopSearch
from determined_lite.experiment._search import Search
from determined_lite.experiment._trial_launch import TrialLauncher
from determined_lite.experiment._trial_logs import TrialLogs
from determined_lite.experiment._wakeup import Wakeup
from determined_lite.store._paths import experiment_dir, make_private_dirs
from determined_lite.store._states import Action, ExperimentState, TrialState

POLL_S = 0.5  # the loop wakes on a run's end and Ctrl-C (_wakeup.py); on the store at least this often


class ExperimentRunner:
    """Drives one experiment to completion (or pause/kill) and returns the exit code."""

    def __init__(
        self,
        store: Any,
        experiment_id: int,
        *,
        test_mode: bool = False,
        out: TextIO = sys.stdout,
        show_progress: bool = True,
        echo_logs: bool = True,
        lock: Optional[RunnerLock] = None,
    ) -> None:
        self.store, self.id = store, experiment_id
        experiment = store.experiments.get(experiment_id)
        if experiment is None:
            raise ValueError(f"experiment {experiment_id} not found")
        config = experiment["config"]
        # The stored config was validated by `experiment create`: read, never checked again.
        settings = ExperimentSettings.from_config(config)
        searcher_settings = SearcherSettings.from_config(config["searcher"])
        pass_fds = (lock.fileno(),) if lock is not None else ()  # the runner lock, held by every trial
        self.launcher = TrialLauncher.of(store, experiment, settings, searcher_settings, test_mode, pass_fds)
        varying = searched_paths(config["hyperparameters"])
        self.progress = Progress(enabled=show_progress, out=out, varying=varying)
        self.logs = TrialLogs(store, experiment_id, self.progress, echo=echo_logs)
        self.search = Search(store, experiment_id, config, settings, searcher_settings, test_mode)
        self.wakeup = Wakeup()  # what ends the loop's wait (its descriptors: closed by run())
        self.runs = Runs(
            store, experiment_id, self.search, self.launcher, settings, self.logs, self.progress, self.wakeup
        )
        self.endings = Endings(store, experiment_id, self.search, self.logs, lock, varying)
        self.stop_signals = 0  # Ctrl-C / SIGTERM received: the first pauses, the second stops now
        self.hangups = 0  # SIGHUP received (the terminal closed): each pauses, none stops now

    def run(self, resume: bool = False) -> int:
        """Run the search (``resume``: from its stored state) until it ends or pauses; the exit
        code (0: COMPLETED)."""
        self.launcher.prestart()  # the fork server warms up while the runner sets up
        self.store.experiments.set_running(self.id, os.getpid())
        make_private_dirs(experiment_dir(self.id))
        if self.launcher.wake_path:
            self.wakeup.listen(self.launcher.wake_path)  # the runs' chiefs announce their questions
        self.logs.log(None, f"experiment {self.id} started by process {os.getpid()}")
        self.runs.reconcile()
        self.search.begin(resume)
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
        for sig in previous:
            signal.signal(sig, self._on_hangup if sig == signal.SIGHUP else self._on_stop_signal)
        try:
            return self._loop()
        except StopSearch as e:  # fail fast (Ray Tune's ``fail_fast``): the experiment ends in ERROR
            self.logs.log(None, str(e))
            return self._stop(ExperimentState.ERROR)
        except KeyboardInterrupt:
            # A second Ctrl-C / SIGTERM: stop the trials now (each resumes from its latest
            # checkpoint) and leave the experiment resumable by `activate`.
            self.runs.stop_all()
            self.endings.mark_paused("interrupted")
            return 1
        except ActionRequired:  # the store's disk is full: stop; `activate` resumes (ACTIVE, no process)
            self.runs.stop_processes()
            raise
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            try:
                self.logs.flush()
            finally:
                self.progress.close()
            self.store.experiments.set_pid(self.id, None)
            self.launcher.executor.close()
            self.wakeup.close()  # after the signal handlers that write to it are gone

    def _on_stop_signal(self, signum: int, frame: Any) -> None:
        """Ctrl-C or SIGTERM: the first pauses the experiment as `det-lite experiment pause` does
        (the loop requests it: trials stop at a checkpoint where they are); the second stops now."""
        self.stop_signals += 1
        self.wakeup.wake_from_signal()
        if self.stop_signals > 1:
            raise KeyboardInterrupt

    def _on_hangup(self, signum: int, frame: Any) -> None:
        """SIGHUP, the terminal closed: pause (the loop requests it), writing on in runner.log."""
        detach_output(experiment_dir(self.id))
        self.hangups += 1
        self.wakeup.wake_from_signal()

    def _loop(self) -> int:
        if not self.search.pausing:
            self.search.release_held()
        signals_seen = 0
        while True:
            if self.stop_signals + self.hangups > signals_seen:
                signals_seen = self.stop_signals + self.hangups
                self._request_pause()
            action = self.store.requests.pending(self.id)
            if action == Action.KILL:
                return self._kill()
            if action == Action.PAUSE:
                self.search.pausing = True
            self.runs.kill_trials(self.store.requests.trial_kills(self.id))
            answer_next_ops(self.runs, self.search)
            self.runs.poll(self.search.pausing)  # runs that ended first: their slots fill in this pass
            if not self.search.pausing:
                self.runs.start_queued()
            self.logs.flush()
            if not self.runs and (code := self._when_idle()) is not None:
                return code
            self.wakeup.wait(wait_s(self.runs, self.wakeup, POLL_S))  # an event; else the store again

    def _request_pause(self) -> None:
        self.store.requests.request(self.id, Action.PAUSE)
        self.logs.log(None, pausing_line(self.id, hangup=self.hangups > 0))

    def _when_idle(self) -> Optional[int]:
        """No run in flight: the exit code once the experiment pauses or ends, None to go on."""
        search = self.search
        if search.pausing:
            self.store.requests.clear(self.id)
            if search.queue or search.held or not search.shutdown:
                self.endings.mark_paused("paused")
                return 1
            # The search finished while pausing: nothing is left to resume.
        if search.queue:
            return None
        if not search.shutdown:
            self.logs.log(None, "searcher has no more work but did not shut down; ending the experiment")
        return self.endings.complete()

    def _kill(self) -> int:
        self.search.pausing = True  # no new trial starts or is created
        self.runs.poll(pausing=True)  # trials that just finished keep their state
        self._stop(ExperimentState.CANCELED)
        self.store.requests.clear(self.id)
        return 1

    def _stop(self, state: ExperimentState) -> int:
        """Every trial stops now and ends CANCELED; the experiment ends in ``state``."""
        self.runs.stop_all()
        self.endings.end(state, trial_state=TrialState.CANCELED)
        return 1
