"""The S3 source (issue 29): `s3://s3_dataset/prefix` through boto3, against moto's server mode.

No S3 server (MinIO, Ceph RGW) can be installed on these machines, so the store is
moto's server mode (getmoto/moto: docs/docs/server_mode.rst: `moto_server -H HOST -p
PORT`, then boto3 with `endpoint_url`): moto's S3 REST API as a real HTTP server process
on a loopback port. boto3 runs its real client path: SigV4 signing, list_objects_v2
pagination, streamed GetObject bodies (botocore's `StreamingBody.iter_chunks`, read in
boto/botocore: botocore/response.py). Credentials are set in the environment only.

boto3 (the `train` and `data` extras) and moto (`test`) are in requirements.lock, so this
module runs wherever the lock is installed: 9 s on 2 cores (15 s when they are busy),
3.5 to 7 s of it botocore's three attempts, with backoff, against the silent endpoint.
"""

import pytest

from contracts.errors import ExitCode
from datapins.cache import Cache
from datapins.errors import DataNotFound, SourceUnavailable
from datapins.prepare import prepare
from datapins.snapshot import snapshot
from datapins.sources import open_source
from mlops.cli import main
from tests.fixtures.common import free_port


def test_an_s3_snapshot_has_the_directory_snapshots_digest(s3_dataset, coco_dataset, tmp_path):
    from_s3 = snapshot(open_source("s3://datasets/shapes/w48", endpoint_url=s3_dataset), "w48")
    from_dir = snapshot(open_source(str(coco_dataset)), "w48")
    assert from_s3.source == "s3://datasets/shapes/w48"
    assert from_s3.digest == from_dir.digest
    assert from_s3.splits["train"].images == from_dir.splits["train"].images

    cache = Cache(tmp_path / "cache")
    source = open_source(from_s3.source, endpoint_url=s3_dataset)
    first = prepare(from_s3, tmp_path / "ws", cache, source)
    second = prepare(from_s3, tmp_path / "ws2", cache, source)
    assert (first.fetched, second.fetched, second.hits) == (13, 0, 13)
    assert (tmp_path / "ws" / "annotations" / "val.json").read_bytes() == \
        (coco_dataset / "annotations" / "val.json").read_bytes()


def test_the_cli_reads_the_endpoint_from_the_environment(s3_dataset, tmp_path, monkeypatch,
                                                         capsys):
    monkeypatch.setenv("MLOPS_DATA_ENDPOINT_URL", s3_dataset)
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


def test_a_missing_object_and_a_silent_endpoint_are_named(s3_dataset, tmp_path):
    source = open_source("s3://datasets/shapes/w48", endpoint_url=s3_dataset)
    with pytest.raises(DataNotFound, match=r"s3://datasets/shapes/w48/images/nope\.png"):
        list(source.chunks("images/nope.png"))
    silent = open_source("s3://datasets/shapes/w48",
                         endpoint_url=f"http://127.0.0.1:{free_port()}")
    with pytest.raises(SourceUnavailable, match="did not answer"):
        silent.list("annotations")
