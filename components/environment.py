"""Every environment variable bakeoff reads or sets, by name, with who sets it: the one place to look them up.

Names only, importing nothing (the bottom of the layers); what a value means stays with the module that reads it.
"""

# ---- bakeoff's own
CACHE_ENV = "BAKEOFF_CACHE"  # the cost cache's folder, instead of defaults.CACHE_DIR
# The file the contention check reads the cores' busy time from, instead of the kernel's /proc/stat: a file that
# holds still says no other process ran (the tests pin the machine idle with one; one test keeps the real probe).
CPU_STAT_ENV = "BAKEOFF_CPU_STAT"
# The file the CPU's feature flags are read from, instead of /proc/cpuinfo: what `training.precision: auto` may pick
# (the tests pin a CPU without bfloat16 units, so that no test's numbers hang on the machine; one gives it them).
CPUINFO_ENV = "BAKEOFF_CPUINFO"
ERROR_FILE_ENV = "BAKEOFF_ERROR_FILE"  # where a step writes its one error line for the process that started it
# Set by `bakeoff run` for a live display; inherited by the kfp.local tasks and from them by the replicas.
PROGRESS_DIR_ENV = "BAKEOFF_PROGRESS_DIR"
IMAGE_ENV = "BAKEOFF_IMAGE"  # --image's variable, as KF_PIPELINES_ENDPOINT is --host's
COOKIES_ENV = "BAKEOFF_KFP_COOKIES"  # the KFP API's session cookies, instead of --cookies
S3_ENDPOINT_ENV = "BAKEOFF_S3_ENDPOINT"
S3_INSECURE_ENV = "BAKEOFF_S3_INSECURE"
S3_REGION_ENV = "BAKEOFF_S3_REGION"
PREFORK_ENV = "BAKEOFF_PREFORK"  # the warm process's socket; replicas start fresh without it
HEARTBEAT_ENV = "BAKEOFF_HEARTBEAT_FILE"  # the file a local replica beats for the watchdog
SERVICE_ACCOUNT_ENV = "BAKEOFF_TFJOB_SERVICE_ACCOUNT"  # names the replicas' service account instead of the step's
# Downward-API variables of bakeoff's Trainer v2 runtime, each from the JobSet label named beside it.
JOBSET_ENV = "BAKEOFF_JOBSET_NAME"  # jobset.sigs.k8s.io/jobset-name: also the headless Service's name
REPLICATED_JOB_ENV = "BAKEOFF_REPLICATED_JOB"  # jobset.sigs.k8s.io/replicatedjob-name
JOB_INDEX_ENV = "BAKEOFF_JOB_INDEX"  # jobset.sigs.k8s.io/job-index
NODES_ENV = "BAKEOFF_NUM_NODES"  # the TrainJob's trainer.numNodes, set by components/backends/trainjob.py

# ---- Kubernetes' and KFP's
KUBERNETES_HOST_ENV = "KUBERNETES_SERVICE_HOST"  # every pod gets it: this process runs in a cluster
KUBECONFIG_ENV = "KUBECONFIG"
COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"  # the Job controller's: this pod's index among the Job's pods
# This step's pod name: KFP's downward-API variable first (commonEnvs in kubeflow/pipelines
# backend/src/v2/compiler/argocompiler/common.go), since HOSTNAME is cut to 63 characters.
POD_NAME_ENVS = ("KFP_POD_NAME", "POD_NAME", "HOSTNAME")
HOST_ENV = "KF_PIPELINES_ENDPOINT"  # kfp.Client's own name for the API address
TOKEN_FILE_ENV = "KF_PIPELINES_SA_TOKEN_PATH"  # kfp's name; Kubeflow's PodDefault sets it in notebooks
TOKEN_ENV = "KF_PIPELINES_TOKEN"
ACCESS_KEY_ENV = "AWS_ACCESS_KEY_ID"  # the store's key: from a Kubernetes Secret or the user's shell, never passed on
SECRET_KEY_ENV = "AWS_SECRET_ACCESS_KEY"

# ---- TensorFlow's and the C runtime's
TF_CONFIG_ENV = "TF_CONFIG"  # MultiWorkerMirroredStrategy's cluster and this replica's task
LOG_LEVEL_ENV = "TF_CPP_MIN_LOG_LEVEL"
DEVICES_ENV = "TF_ENABLED_DEVICE_TYPES"
LEGACY_KERAS_ENV = "TF_USE_LEGACY_KERAS"
ONEDNN_ENV = "TF_ENABLE_ONEDNN_OPTS"
INTRA_OP_THREADS_ENV = "TF_NUM_INTRAOP_THREADS"
INTER_OP_THREADS_ENV = "TF_NUM_INTEROP_THREADS"
THREAD_VARIABLES = (INTRA_OP_THREADS_ENV, INTER_OP_THREADS_ENV, "OMP_NUM_THREADS")  # every pool a replica sizes
PRELOAD_ENV = "LD_PRELOAD"
