"""The `bakeoff` command line: shared flags, local commands, cluster commands."""
