"""The run report: one self-contained HTML page (and a Markdown leaderboard) from a run's selection record."""
