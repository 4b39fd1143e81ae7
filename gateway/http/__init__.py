"""The OJS HTTP binding (`gateway serve`): an edge over the SDK and the read model of jobs
(gateway/view). The app is app.py's `create_app`; importing a module here imports no more
than it needs."""
