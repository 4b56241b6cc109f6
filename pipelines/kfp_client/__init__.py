"""The cluster side of bakeoff: the compiled pipeline uploaded, run and scheduled through a KFP API (``kfp.Client``)."""
