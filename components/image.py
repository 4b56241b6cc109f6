"""The one runtime image every component and TFJob replica runs."""

# Built from images/Dockerfile (`make image`); locally the same code runs from
# the virtual environment instead, so the name only matters on a cluster.
BASE_IMAGE = "bakeoff:latest"
