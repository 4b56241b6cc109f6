"""The store keys that multi-user Kubeflow Pipelines gives a profile, made on SeaweedFS the way KFP makes them.

KFP's profile controller (manifests/kustomize/base/installs/multi-user/pipelines-profile-controller/sync.py,
kubeflow/pipelines) calls SeaweedFS's IAM API with its admin keys: CreateAccessKey(UserName=<namespace>),
then PutUserPolicy with the document below; from 2.17 on it also sets a bucket policy. The documents are
transcribed from that file at each release tag (data, not code); ``{bucket}`` stands for its
``S3_BUCKET_NAME = 'mlpipeline'`` and ``{namespace}`` for the profile's namespace, as in its f-strings.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING
from xml.etree import ElementTree

if TYPE_CHECKING:
    from tests.conftest import WeedServer

IAM_REGION = "us-east-1"  # SeaweedFS checks the signature against the scope the request names; any region does
KEY_WAIT = 30.0  # seconds for SeaweedFS's S3 gateway to take a new key from the filer (well under 1 s here)

# sync.py at 2.15.0 lines 356-377 (iam.put_user_policy in sync()), and unchanged at 2.16.0 lines 388-409:
# Put/Get/List below four prefixes; no s3:DeleteObject, nothing on the bucket itself.
USER_POLICY_2_15 = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Action": ["s3:Put*", "s3:Get*", "s3:List*"],
            "Resource": [
                "arn:aws:s3:::{bucket}/artifacts/*",
                "arn:aws:s3:::{bucket}/private-artifacts/{namespace}/*",
                "arn:aws:s3:::{bucket}/private/{namespace}/*",
                "arn:aws:s3:::{bucket}/shared/*",
            ],
        }
    ],
}

# sync.py at 2.17.0 lines 468-492 (iam.put_user_policy in sync()): the same, plus s3:DeleteObject.
USER_POLICY_2_17 = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Action": ["s3:Put*", "s3:Get*", "s3:List*", "s3:DeleteObject"],
            "Resource": [
                "arn:aws:s3:::{bucket}/artifacts/*",
                "arn:aws:s3:::{bucket}/private-artifacts/{namespace}/*",
                "arn:aws:s3:::{bucket}/private/{namespace}/*",
                "arn:aws:s3:::{bucket}/shared/*",
            ],
        }
    ],
}

# sync.py at 2.17.0 lines 186-236 (`desired` in ensure_bucket_list_policy, put at line 247 with
# s3.put_bucket_policy); called at line 494 only in the branch of sync() that creates a new key (lines
# 458-494: a profile whose secret exists is left as it is): a profile created before the upgrade keeps
# USER_POLICY_2_15, and the bucket gets this policy only once some profile is created after the upgrade.
# ${aws:username} is the policy's own variable, resolved by SeaweedFS per request.
BUCKET_POLICY_2_17 = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Sid": "AllowOwnDeepList",
            "Effect": "Allow",
            "Principal": "*",
            "Action": "s3:ListBucket",
            "Resource": "arn:aws:s3:::{bucket}",
            "Condition": {
                "StringLike": {
                    "s3:prefix": [
                        "private-artifacts/${aws:username}/*",
                        "private/${aws:username}/*",
                        "artifacts/*",
                        "shared/*",
                    ]
                }
            },
        },
        {
            "Sid": "AllowHeadBucket",
            "Effect": "Allow",
            "Principal": "*",
            "Action": "s3:ListBucket",
            "Resource": "arn:aws:s3:::{bucket}",
            "Condition": {"StringEquals": {"s3:RequestMethod": "HEAD"}},
        },
        {
            "Sid": "AllowTopLevelDelimitedBrowse",
            "Effect": "Allow",
            "Principal": "*",
            "Action": "s3:ListBucket",
            "Resource": "arn:aws:s3:::{bucket}",
            "Condition": {
                "Null": {"s3:prefix": "true"},
                "StringEquals": {"s3:delimiter": "/"},
            },
        },
        {
            "Sid": "DenyOtherDeepList",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "s3:ListBucket",
            "Resource": "arn:aws:s3:::{bucket}",
            "Condition": {
                "StringLike": {"s3:prefix": ["private-artifacts/*", "private/*"]},
                "StringNotLike": {
                    "s3:prefix": [
                        "private-artifacts/${aws:username}/*",
                        "private/${aws:username}/*",
                    ]
                },
            },
        },
    ],
}


# SeaweedFS 4.00 (KFP 2.15/2.16) stores no policy document for PutUserPolicy: it keeps, per resource and action,
# the identity action "<Write|Read|List>:<bucket/path>" (weed/iamapi/iamapi_management_handlers.go at 4.00:
# the names at lines 30-37, MapToStatementAction at 47-68, GetActions at 314-348, PutUserPolicy at 220-241,
# whose document stays in memory only). 4.34 reads those actions back after KFP's upgrade to 2.17, and judges
# them by prefix, as 4.00 did; 4.00 itself is not on PyPI, so its keys are made with these actions on 4.34.
ACTIONS_4_00 = {"s3:Put*": "Write", "s3:Get*": "Read", "s3:List*": "List"}

# The buckets of the KFP clusters modelled: without a bucket policy (2.15/2.16, or 2.17 where no profile was
# created since the upgrade), and with 2.17's.
BUCKET_BEFORE_2_17 = "kfp-2-16"
BUCKET_2_17 = "kfp-2-17"


@dataclass(frozen=True)
class ProfileSetup:
    """One profile's store key, as a KFP release leaves it: its namespace, bucket and how it was made."""

    name: str
    namespace: str
    bucket: str
    made_by: str  # the KFP release whose profile controller made the key: "2.16" (on SeaweedFS 4.00) or "2.17"


PROFILE_SETUPS = (
    # KFP 2.15/2.16; and a profile of theirs after the upgrade to 2.17, before any new profile sets the bucket policy.
    ProfileSetup("kfp-2.16-profile", "profile-a", BUCKET_BEFORE_2_17, made_by="2.16"),
    # KFP 2.17: a profile from before the upgrade, once a new one has set the bucket policy.
    ProfileSetup("kfp-2.16-profile-on-2.17", "profile-b", BUCKET_2_17, made_by="2.16"),
    ProfileSetup("kfp-2.17-profile", "profile-c", BUCKET_2_17, made_by="2.17"),
)


def actions_4_00(user_policy: dict) -> list[str]:
    """The identity actions SeaweedFS 4.00 keeps for ``user_policy`` (see ACTIONS_4_00)."""
    return [
        f"{ACTIONS_4_00[action]}:{resource.split(':', 5)[5]}"
        for statement in user_policy["Statement"]
        for resource in statement["Resource"]
        for action in statement["Action"]
    ]


def make_profile_keys(server: WeedServer, setup: ProfileSetup) -> dict[str, str]:
    """The profile's store keys, made as KFP's profile controller makes them (``server`` runs with ``kfp=True``)."""
    import minio

    if setup.made_by == "2.16":
        policy = filled(USER_POLICY_2_15, setup.bucket, setup.namespace)
        # What 4.00 would have stored; the keys are the test's own (4.00 makes random ones).
        keys = {"AWS_ACCESS_KEY_ID": f"{setup.namespace}-key", "AWS_SECRET_ACCESS_KEY": f"{setup.namespace}-secret"}
        server.shell(
            f"s3.configure -user {setup.namespace} -access_key {keys['AWS_ACCESS_KEY_ID']}"
            f" -secret_key {keys['AWS_SECRET_ACCESS_KEY']} -actions {','.join(actions_4_00(policy))} -apply"
        )
    else:
        policy = filled(USER_POLICY_2_17, setup.bucket, setup.namespace)
        answer = iam_call(server.iam_endpoint, server.keys, "CreateAccessKey", UserName=setup.namespace)
        keys = {
            "AWS_ACCESS_KEY_ID": text_of(answer, "AccessKeyId"),
            "AWS_SECRET_ACCESS_KEY": text_of(answer, "SecretAccessKey"),
        }
        iam_call(
            server.iam_endpoint,
            server.keys,
            "PutUserPolicy",
            UserName=setup.namespace,
            PolicyName=f"KubeflowProject{setup.namespace}",
            PolicyDocument=json.dumps(policy),
        )
        admin = minio.Minio(
            server.endpoint,
            secure=False,
            access_key=server.keys["AWS_ACCESS_KEY_ID"],
            secret_key=server.keys["AWS_SECRET_ACCESS_KEY"],
            region="us-east-1",
        )
        admin.set_bucket_policy(setup.bucket, json.dumps(filled(BUCKET_POLICY_2_17, setup.bucket)))
    server.wait_for_keys(keys, time.monotonic() + KEY_WAIT)
    return keys


def filled(document: dict, bucket: str, namespace: str = "") -> dict:
    """``document`` with sync.py's f-string fields put in (``${aws:username}`` is left for the server)."""

    def fill(value: object) -> object:
        if isinstance(value, str):
            return value.replace("{bucket}", bucket).replace("{namespace}", namespace)
        if isinstance(value, list):
            return [fill(item) for item in value]
        if isinstance(value, dict):
            return {key: fill(item) for key, item in value.items()}
        return value

    return fill(document)  # type: ignore[return-value]


def iam_call(endpoint: str, keys: dict[str, str], action: str, **params: str) -> ElementTree.Element:
    """One request to an AWS-style IAM API (SeaweedFS's `-iam`), signed with Signature V4 as botocore signs it."""
    body = urllib.parse.urlencode({"Action": action, "Version": "2010-05-08", **params}).encode()
    now = datetime.datetime.now(datetime.UTC)
    stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    payload = hashlib.sha256(body).hexdigest()
    headers = {
        "content-type": "application/x-www-form-urlencoded; charset=utf-8",
        "host": endpoint,
        "x-amz-content-sha256": payload,
        "x-amz-date": stamp,
    }
    names = sorted(headers)
    canonical = "\n".join(
        ["POST", "/", "", *(f"{name}:{headers[name]}" for name in names), "", ";".join(names), payload]
    )
    scope = f"{day}/{IAM_REGION}/iam/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = f"AWS4{keys['AWS_SECRET_ACCESS_KEY']}".encode()
    for part in (day, IAM_REGION, "iam", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={keys['AWS_ACCESS_KEY_ID']}/{scope},"
        f" SignedHeaders={';'.join(names)}, Signature={signature}"
    )
    request = urllib.request.Request(f"http://{endpoint}/", data=body, headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        return ElementTree.fromstring(response.read())


def text_of(root: ElementTree.Element, tag: str) -> str:
    """The text of the first element named ``tag`` in an IAM answer, whatever its XML namespace."""
    for element in root.iter():
        if element.tag.rsplit("}", 1)[-1] == tag and element.text:
            return element.text
    raise KeyError(f"no {tag} in the IAM answer")
