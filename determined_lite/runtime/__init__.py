"""Worker-side facts every layer above may read: what a trial's workers are asked to do and
report (``_spec.py``: ``WorkerSpec``, ``WorkerResult``), how a worker failed (``_failures.py``:
failure records and files), and what a trial's process knows about its trial (``_cluster.py``:
``det.get_cluster_info()``, the live script trial).

Below ``distributed/`` and above ``config/`` and ``store/``; it imports neither torch nor any
layer above it. Importing this package imports nothing: use its modules.
"""
