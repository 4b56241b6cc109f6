"""`make bench`: bakeoff's speed and quality, each figure against its limit."""
