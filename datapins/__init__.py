"""Dataset pins (issue 29): a lock file in the model repo names a COCO dataset by content.

`snapshot` reads a dataset from a source (a directory, or `s3://bucket/prefix`) and
returns a :class:`~datapins.lock.DataLock`; `prepare` fetches exactly the pinned files
through a content-addressed cache, verifies every digest and validates the data;
`diff` says what changed between two locks. The room imports only `contracts`, so the
pipeline's prepare-data step (workflows) and the CLI (mlops) can both use it.

Source layout (a directory or an S3 prefix; the same relative paths in both)::

    SOURCE/annotations/<split>.json    one COCO file per split: train, val, holdout, ...
    SOURCE/images/<file_name>          each image's COCO `file_name` is relative to images/
"""
