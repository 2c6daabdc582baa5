"""The generated-kernel disk cache refuses hostile directories and never trusts a file it
finds: planted code is replaced before anything imports it."""
import os
import stat
import sys

import pytest

from duograph.runtime.kernel_cache import KernelCacheError, cache_dir, write_verified

posix = pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX permissions")


@posix
def test_cache_dir_is_private(tmp_path):
    folder = cache_dir(str(tmp_path / "base"))
    for path in (folder, os.path.dirname(folder)):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o700


@posix
def test_world_writable_directory_is_refused_and_falls_back_to_a_private_one(
        tmp_path, monkeypatch):
    hostile = tmp_path / "shared"
    hostile.mkdir()
    os.chmod(hostile, 0o777)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    folder = cache_dir(str(hostile))
    assert folder.startswith(str(tmp_path / "tmp"))
    # a pre-created world-writable fallback is refused too
    os.chmod(os.path.dirname(folder), 0o777)
    with pytest.raises(KernelCacheError, match="writable by group or others"):
        cache_dir(str(hostile))


@posix
def test_symlinked_cache_directory_is_refused(tmp_path, monkeypatch):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    base = tmp_path / "base"
    base.mkdir(mode=0o700)
    os.symlink(real, base / "numba")
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    folder = cache_dir(str(base))
    assert not folder.startswith(str(base))      # the link was refused: the fallback


@posix
def test_planted_kernel_file_is_replaced_before_import(tmp_path):
    folder = cache_dir(str(tmp_path / "base"))
    marker = tmp_path / "pwned"
    name = "fused_0123456789abcdef0123.py"
    with open(os.path.join(folder, name), "w") as f:
        f.write(f"open({str(marker)!r}, 'w').write('x')\ndef kernel(): return 'evil'\n")
    source = "def kernel():\n    return 'good'\n"
    path = write_verified(folder, name, source)
    assert open(path).read() == source
    namespace = {}
    exec(compile(open(path).read(), path, "exec"), namespace)
    assert namespace["kernel"]() == "good" and not marker.exists()


@posix
def test_symlink_planted_under_the_kernel_name_is_not_followed(tmp_path):
    folder = cache_dir(str(tmp_path / "base"))
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    os.symlink(victim, os.path.join(folder, "fused_x.py"))
    path = write_verified(folder, "fused_x.py", "def kernel():\n    pass\n")
    assert victim.read_text() == "precious"
    assert not os.path.islink(path)


def test_names_with_paths_are_refused(tmp_path):
    folder = cache_dir(str(tmp_path / "base"))
    for bad in ("../x.py", "a/b.py", "", ".."):
        with pytest.raises(ValueError):
            write_verified(folder, bad, "x = 1\n")


def test_existing_identical_file_is_kept(tmp_path):
    folder = cache_dir(str(tmp_path / "base"))
    path = write_verified(folder, "k.py", "x = 1\n")
    before = os.stat(path).st_mtime_ns
    assert write_verified(folder, "k.py", "x = 1\n") == path
    assert os.stat(path).st_mtime_ns == before
    assert sys.modules.get("k") is None
