"""gitops.archive: the PEP 706 `data` filter's refusals by hand where tarfile lacks it.

Debian 12's python3 (3.11.2, the base of our images) has no `filter=`: the
controller and the UI failed there to read the GitOps repo
(`TarFile.extractall() got an unexpected keyword argument 'filter'`, seen
in tests/images/test_images.py). The fallback is tested directly: this interpreter
has the filter.
"""

import io
import subprocess
import tarfile

import pytest

from gitops.archive import checked_members, extract


def _tar(*entries):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, kind, data in entries:
            info = tarfile.TarInfo(name)
            info.type = kind
            info.mode = 0o4777 if kind == tarfile.REGTYPE else 0o755
            if kind == tarfile.SYMTYPE:
                info.linkname = data.decode()
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return tarfile.open(fileobj=buf)


def test_files_and_dirs_are_kept_links_left_out_and_set_id_bits_cleared(tmp_path):
    tar = _tar(("apps", tarfile.DIRTYPE, b""), ("apps/a.yaml", tarfile.REGTYPE, b"x: 1\n"),
               ("apps/link", tarfile.SYMTYPE, b"/etc/passwd"))
    kept = checked_members(tar, tmp_path)
    assert [m.name for m in kept] == ["apps", "apps/a.yaml"]
    assert kept[1].mode == 0o755
    tar.extractall(tmp_path, members=kept)
    assert (tmp_path / "apps" / "a.yaml").read_text() == "x: 1\n"
    assert not (tmp_path / "apps" / "link").exists()


@pytest.mark.parametrize("name", ["../escape.yaml", "/etc/escape.yaml", "apps/../../x"])
def test_a_path_outside_the_destination_is_refused(tmp_path, name):
    tar = _tar((name, tarfile.REGTYPE, b"x"))
    with pytest.raises(ValueError, match="outside the destination"):
        checked_members(tar, tmp_path / "dest")


def test_extract_reads_a_real_git_archive(tmp_path):
    repo = tmp_path / "r"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "apps").mkdir()
    (repo / "apps" / "d.yaml").write_text("kind: Deployment\n")
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@x",
                    "commit", "-qm", "x"], check=True)
    data = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", "HEAD"],
                          check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        extract(tar, tmp_path / "out")
    assert (tmp_path / "out" / "apps" / "d.yaml").read_text() == "kind: Deployment\n"
