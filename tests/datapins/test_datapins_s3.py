"""The S3 source (issue 29): `s3://bucket/prefix` through boto3, against moto's server mode.

No S3 server (MinIO, Ceph RGW) can be installed on these machines, so the store is
`moto_server` (moto's S3 REST API as a real HTTP server process on a loopback port);
boto3 runs its real client path: SigV4 signing, list_objects_v2 pagination, streamed
GetObject bodies (botocore's `StreamingBody.iter_chunks`, read in
boto/botocore: botocore/response.py). Credentials are set in the environment only.

boto3 and moto are not in requirements.lock (botocore caps python-dateutil below 3,
kubernetes 37 needs 3 or later: pip cannot install both from one lock), so without them
this module is skipped, with that reason shown.
"""

import pytest

pytest.importorskip("boto3", reason="boto3 is the `data` extra, outside requirements.lock")
pytest.importorskip("moto", reason="moto (test-only) is outside requirements.lock")

import boto3  # noqa: E402

from contracts.errors import ExitCode  # noqa: E402
from datapins.cache import Cache  # noqa: E402
from datapins.errors import DataNotFound, SourceUnavailable  # noqa: E402
from datapins.prepare import prepare  # noqa: E402
from datapins.snapshot import snapshot  # noqa: E402
from datapins.sources import open_source  # noqa: E402
from mlops.cli import main  # noqa: E402
from tests.fixtures.common import free_port  # noqa: E402


@pytest.fixture
def bucket(moto_s3, coco_dataset, monkeypatch):
    """The fixture dataset uploaded under s3://datasets/shapes/w48 in moto's server."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    s3 = boto3.client("s3", endpoint_url=moto_s3)
    if "datasets" not in {b["Name"] for b in s3.list_buckets()["Buckets"]}:
        s3.create_bucket(Bucket="datasets")  # one server per module; uploads overwrite
    for path in sorted(coco_dataset.rglob("*")):
        if path.is_file():
            key = "shapes/w48/" + path.relative_to(coco_dataset).as_posix()
            s3.upload_file(str(path), "datasets", key)
    return moto_s3


def test_an_s3_snapshot_has_the_directory_snapshots_digest(bucket, coco_dataset, tmp_path):
    from_s3 = snapshot(open_source("s3://datasets/shapes/w48", endpoint_url=bucket), "w48")
    from_dir = snapshot(open_source(str(coco_dataset)), "w48")
    assert from_s3.source == "s3://datasets/shapes/w48"
    assert from_s3.digest == from_dir.digest
    assert from_s3.splits["train"].images == from_dir.splits["train"].images

    cache = Cache(tmp_path / "cache")
    source = open_source(from_s3.source, endpoint_url=bucket)
    first = prepare(from_s3, tmp_path / "ws", cache, source)
    second = prepare(from_s3, tmp_path / "ws2", cache, source)
    assert (first.fetched, second.fetched, second.hits) == (13, 0, 13)
    assert (tmp_path / "ws" / "annotations" / "val.json").read_bytes() == \
        (coco_dataset / "annotations" / "val.json").read_bytes()


def test_the_cli_reads_the_endpoint_from_the_environment(bucket, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MLOPS_DATA_ENDPOINT_URL", bucket)
    out = tmp_path / "data.lock.json"
    assert main(["data", "snapshot", "s3://datasets/shapes/w48", "--name", "w48",
                 "--out", str(out)]) == 0
    assert main(["data", "prepare", str(out), "--dest", str(tmp_path / "ws"),
                 "--cache", str(tmp_path / "cache")]) == 0
    assert "13 fetched" in capsys.readouterr().out
    assert main(["data", "snapshot", "s3://no-such-bucket/x", "--name", "w48",
                 "--out", str(out)]) == ExitCode.NOT_FOUND
    assert "s3://no-such-bucket/x/annotations: no such object (NoSuchBucket)" \
        in capsys.readouterr().err


def test_a_missing_object_and_a_silent_endpoint_are_named(bucket, tmp_path):
    source = open_source("s3://datasets/shapes/w48", endpoint_url=bucket)
    with pytest.raises(DataNotFound, match=r"s3://datasets/shapes/w48/images/nope\.png"):
        list(source.chunks("images/nope.png"))
    silent = open_source("s3://datasets/shapes/w48",
                         endpoint_url=f"http://127.0.0.1:{free_port()}")
    with pytest.raises(SourceUnavailable, match="did not answer"):
        silent.list("annotations")
