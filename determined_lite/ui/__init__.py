"""``det-lite ui``: a local web dashboard over the experiment store, as Determined's web UI.

* ``_server.py``: the HTTP server (standard library), the token, routing, static files;
* ``_queries.py``: the JSON documents of ``GET /api/...``, read from a read-only store;
* ``_downsample.py``: learning curves bounded per trial, minima and maxima kept;
* ``_searcher.py``: progress and ASHA rungs out of the saved searcher state;
* ``_actions.py``: the writes: pause, activate and kill (experiment or trial) through the CLI's
  code paths, labels and notes, the TensorBoard button;
* ``_download.py``: a checkpoint's files as a ``.tar.gz``, through the storage layer;
* ``static/``: the page (``index.html``, ``app.js``, ``hparams.js``, ``trials.js``,
  ``models.js``, ``app.css``) and the vendored charting library of the curves (``vendor/``:
  uPlot, MIT, with its license). Nothing is fetched from the network.

The URL and JSON contract is in docs/design.md ("The dashboard").
"""

from determined_lite.ui._server import TOKEN_HEADER, DashboardServer

__all__ = ["TOKEN_HEADER", "DashboardServer"]
