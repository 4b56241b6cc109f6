"""Serving the winner: bakeoff's SavedModel behind KServe's protocols (model.py), its server (server.py, startup.py)
and version watcher (watcher.py)."""
