"""What a trial reports to the experiment store, whoever runs its loop.

- ``_reporter.py``: :class:`TrialReporter`, the chief's one writer of metrics and checkpoints
  (class trials through ``pytorch/_store_callback.py``, Core API scripts directly), the
  pause/kill poll, and the reporter of a worker spec's trial;
- ``_sink.py``: :class:`RemoteReporter`, the same calls from a chief away from the store (the
  ``ray`` executor) as JSON lines to the driver, which replays them and answers its store reads;
- ``_retention.py``: which checkpoints a ``checkpoint_storage`` policy keeps, and dropping the rest;
- ``_local.py``: a plain-Python ``Trainer.fit`` recorded as a ``local`` experiment;
- ``_metric.py``: ``is_better``, the one rule for the best searcher metric.

Below ``pytorch/`` (which plugs into it) and above ``distributed/``; it imports no training
loop. Importing this package imports nothing: use its modules.
"""
