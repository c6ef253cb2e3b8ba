"""Dataset pins: a lock file in the model repo names a dataset by content.

`snapshot` reads a dataset where it lies (a directory or `s3://bucket/prefix`, in one of
the `layouts`) into a `lock.DataLock`; `prepare` fetches exactly the pinned files through
a content-addressed `cache`, verified and validated; `diff` says what changed between two
locks. The room imports only `contracts` and `cogs`, so the pipeline's prepare-data step
and the CLI can both use it.
"""

__all__ = [
    "cache",     # the content-addressed file cache prepare fills
    "diff",      # what changed between two locks, for the PR's body
    "errors",    # DataError and its kinds
    "layouts",   # where a dataset's annotations and images are (mlops data snapshot)
    "lock",      # the lock file: DataLock, read_lock, write_lock
    "prepare",   # the pinned files into a workspace, checked
    "roles",     # one dataset out of the pins a model repo names per role
    "snapshot",  # pin a dataset by content
    "sources",   # open a source (directory or S3) by its URI
]
