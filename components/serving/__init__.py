"""Serving the winner: bakeoff's SavedModel behind KServe's protocols (model.py), its server and version watcher
(server.py)."""
