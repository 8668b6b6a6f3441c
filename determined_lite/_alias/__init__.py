"""Not imported as ``determined_lite._alias``: this directory goes on ``sys.path`` so that its
``determined`` package is importable as top-level ``determined`` (``compat/_install.py``). The top
layer with ``cli``: it re-exports any layer. It ships in the wheel: pyproject's
``packages.find`` (``determined_lite*``) finds its packages."""
