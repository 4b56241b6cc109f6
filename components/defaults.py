"""Every default of bakeoff, once: the CLI, the pipeline and the components all read them from here."""

from __future__ import annotations

from pathlib import Path

# The data: Debian's dataset-fashion-mnist installs the four IDX files here.
SOURCE = "/usr/share/datasets/fashion-mnist"
VALIDATION_SIZE = 5000  # carved from train with SEED; the test split is never used for selection
CARVED_SHARE = 0.2  # of train, each carved split where VALIDATION_SIZE each would take over half: small folders train
SHARDS = 8  # every split gets this many files, so up to 8 workers read disjoint whole files
SEED = 0
IMAGE_SIZE: list[int] = []  # [H, W] resizes every image as ingest reads it; []: the source's own size (all alike)
RESIZE = "bilinear"  # the Pillow filter a declared image_size resizes with (recorded in DatasetMetadata)
IMAGE_SIDES = (4, 1024)  # the smallest and largest image_size side a bake-off takes, in pixels
SKIPPED_NAMES = 20  # non-image files a source may hold are counted; this many are named in the log and metadata
SOURCE_READERS = 8  # files of an S3 source read at once: enough to hide the round trips, bounded in memory

# The contest: the variants YAML a run uses unless --config names another.
CONFIG = Path(__file__).resolve().parent.parent / "pipelines" / "variants.yaml"
METRIC = "val_accuracy"  # its direction comes with it (components/selection/ranking.py)
MIN_IMPROVEMENT = 0.0  # a new winner must beat the published champion by this much; a tie keeps the champion
# ... and beat it beyond noise: the paired test on the validation split (McNemar's exact test for accuracy, a paired
# bootstrap for loss) puts the gain above 0 at this confidence. Reruns of one config spread ±0.003–0.004 in accuracy
# (benchmarks/journal.md): a point comparison would swap the champion for an equal model about half the time.
PROMOTION_CONFIDENCE = 0.95
BOOTSTRAP_SAMPLES = 2000  # resamples of the validation split for the val_loss interval; seeded with SEED
MODEL_NAME = "fashion-mnist"
SEARCH_SAMPLES = (
    8  # draws per variant with a uniform/log_uniform/int_uniform space, unless search.samples says otherwise
)
HALVING_ETA = (
    3  # successive halving keeps the best third at each rung and trains it three times as long (Hyperband's choice)
)
# Rungs of successive halving the compiled pipeline holds, each skipped where a run needs fewer: 256 variants (the
# most a config or the run form may list) at eta 2 need 9 (256, 128, ..., 2, then the lone survivor), so any run fits.
MAX_RUNGS = 9
HALVING_WINDOW = (
    3  # a rung ranks variants by the mean validation metric over the last third of their epochs (halving.rung_score)
)
# A budget keeps a variant's last draw only if the search then trains at least this share of the epochs it would
# without draws: 5 of 20 epochs of the costly `wide` draw scored below 10 of the seed `batch_norm` (results.md).
DRAWN_EPOCHS_SHARE = 0.5
# A budget with room to spare lengthens a halving search's max_epochs to fill it, up to this many times the epochs
# written: the seed `batch_norm` still gained from 10 to 15 epochs (results.md), and a large budget must not turn a
# 20-epoch search into a 200-epoch one its config never asked for.
GROWN_EPOCHS_FACTOR = 2
# A budgeted run's halve steps cost the rest of the search as the plan does, scaled by how far the run so far is off
# its plan (components/search/deadline.py), within these bounds: a stalled or idle start must not decide alone.
DEADLINE_SCALE = (0.5, 2.0)
# ... and keep at most this many times their rung's keep: a large budget must not turn halving into training everyone.
DEADLINE_KEEP_FACTOR = 2
# The plan's cost model (components/search/budget.py): an epoch costs its steps, each on the line (by forward MACs
# per image) through the steps of the two nearest networks of its shape, timed in short real jobs on this machine
# and refreshed by each local run's jobs; each job costs a measured start more, each pipeline step a process start.
# Measured once per machine and TensorFlow, kept in CACHE_DIR (BAKEOFF_CACHE overrides it).
# A run's first measurement of this machine's costs may take this share of its budget (which counts from the
# command's start): the networks its search lists first are timed first, and those left untimed sit the run out.
# Timing 5 networks at 64x64 took 14 min of a 5-min budget and left every variant 1 epoch (issue 59).
CALIBRATION_SHARE = 0.25
CALIBRATION_STEPS = 192  # timed steps per network, after one execution (of the variant's steps_per_execution) to trace
# A run's job prices its network only over at least this many steady steps (after its first execution): as many as a
# calibration's job times, so a run's word never stands on less than the one it replaces. A 1-epoch job of 23 steps
# timed 7, and priced the seed cnn at 29.8 ms a step against the calibration's 19.3 (issue 49).
MIN_STEADY_STEPS = CALIBRATION_STEPS
# A newer measure of a network (a run's job) replaces the cached step only when it is more than this share off it.
# Within it lies most of the host's own spread (two calibrations of one network 40 min apart: 26 and 22.9 ms, 13 %;
# journal.md: three within 30 min, 16.1 / 20.2 / 20.1 ms), which would otherwise move the default's plan by a draw or
# epochs on every run; a cached step up to 10 % off the host's moves the plan's estimate by at most as much.
COST_BAND = 0.1
CACHE_DIR = Path("~/.cache/bakeoff")
BUSY_SHARE = 0.1  # of the cores' time other processes used while a run or a calibration timed: more, and it is not kept
MISCLASSIFIED = (
    24  # the winner's most confident test mistakes kept in the selection record: one screenful in the report
)

# Running each TFJob.
TIMEOUT_SECONDS = 3600  # the TFJob's activeDeadlineSeconds
BACKOFF_LIMIT = 2  # job restarts before it fails for good
TRAINER = "tfjob"  # on a cluster: a TFJob (Training Operator v1) or, with "trainjob", a TrainJob (Kubeflow Trainer v2)
LOCAL_PARALLELISM = 1  # variants trained at once on one machine: replicas share its cores
CLUSTER_PARALLELISM = 3
# Each step's pod on a cluster: (CPU request, CPU limit, memory request, memory limit), Kubernetes quantities. A profile
# namespace whose ResourceQuota counts requests.cpu/requests.memory refuses pods without them. Sized to the step's
# work: check and halve read records and settings; ingest decodes the source into shards; select evaluates every
# candidate's SavedModel on validation and the winner on test; train only submits its TFJob and waits, its replicas
# being the TFJob's own pods. `bakeoff compile --cpu/--memory STEP=REQUEST[,LIMIT]` overrides any of them.
STEP_RESOURCES = {
    "check": ("250m", "1", "512Mi", "1Gi"),
    "ingest": ("1", "2", "2Gi", "4Gi"),
    "train": ("100m", "500m", "512Mi", "1Gi"),
    "halve": ("250m", "1", "512Mi", "1Gi"),
    "select": ("1", "2", "2Gi", "4Gi"),
}
LOG_TAIL = 20  # lines of a failed replica's log repeated in the error
HEARTBEAT_SECONDS = 1.0  # a local replica beats this often for the watchdog
TF_LOG_LEVEL = "2"  # TF_CPP_MIN_LOG_LEVEL unless the user set one: INFO and WARNING hidden, errors shown
SUSPECT_SECONDS = 5.0  # a replica quiet this long when a peer fails is named as the cause
STALL_SECONDS = 30.0  # a replica quiet this long is stopped as stalled, even if no peer noticed
PREFORK_WAIT_SECONDS = 60.0  # the longest a replica waits on the warm process (its import) before starting fresh
S3_RETRY_SECONDS = 120.0  # how long one store request is retried after it first fails: a store pod's restart
S3_RETRY_FIRST_PAUSE = 0.5  # seconds before a store request's first retry, doubled after each failure ...
S3_RETRY_MAX_PAUSE = 8.0  # ... up to this
API_ATTEMPTS = 8  # tries of one Kubernetes API call before a transient failure becomes the step's error
API_RETRY_FIRST_PAUSE = 1.0  # seconds before its second try, doubled after each failure ...
API_RETRY_MAX_PAUSE = 30.0  # ... up to this
# How long past a job's timeout its runner waits for the controller to stop it (its own activeDeadlineSeconds)
# before deleting it: a quarter of the timeout, within these bounds (a 20 s job need not wait 2 min).
JOB_GRACE_SHARE = 0.25
JOB_GRACE_SECONDS = (15.0, 120.0)
S3_CONNECT_TIMEOUT = 5.0  # seconds: a store that is down refuses at once, one that is unreachable must not take minutes
S3_READ_TIMEOUT = 60.0  # seconds without a byte from the store before a request counts as failed (and is retried)
PUBLISH_ATTEMPTS = 100  # version numbers one publish tries before it gives up (each lost to another publisher)
# The field manager deploy's server-side applies own their fields under (metadata.managedFields).
FIELD_MANAGER = "bakeoff"

# Where things go.
LOCAL_STORE = "./bakeoff-store"
REPORT = Path("report.html")  # where `bakeoff report` writes the run's page
PROGRESS_RUNS = "runs"  # below the work dir, one folder per watched `bakeoff run`: progress events and logs
REPORTS = "reports"  # below the work dir, where `bakeoff run` writes each run's page as <run id>.html
WORK_DIR = Path(".bakeoff")  # kfp.local's outputs and cache
PROGRESS_REFRESH_PER_SECOND = (
    2.0  # `run`'s live display redraws this often: epochs take seconds, and each redraw reads every event file
)
IMAGE = "ghcr.io/bakeoff/bakeoff:0.1.0"  # built from images/Dockerfile; the Makefile reads this line
CLUSTER_STORE = "s3://mlpipeline/private/{namespace}/bakeoff"  # writable by a profile's keys on multi-user Kubeflow
CLUSTER_S3_ENDPOINT = "seaweedfs.kubeflow:9000"  # KFP >= 2.16; a run-time parameter for older ones
SERVING_PORT = 8080  # the model server's HTTP port: KServe's container port, and `bakeoff serve`'s
SERVING_POLL_SECONDS = 10.0  # how often a server of `latest` looks for a newer complete version
SERVING_MAX_BATCH = 64  # images per model call when concurrent requests are merged; 1: each request runs alone
SERVING_BATCH_WINDOW_MS = 2.0  # the longest a request waits for others to merge with while the model is busy
DEPLOY_TIMEOUT_SECONDS = 600  # `deploy --wait`: a first start pulls the image and copies the model
S3_REGION = "us-east-1"  # what MinIO and SeaweedFS answer; BAKEOFF_S3_REGION overrides it
