"""Not imported as ``determined_lite.compat._alias``: this directory goes on ``sys.path`` so that
its ``determined`` package is importable as top-level ``determined`` (see ``_install.py``)."""
