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


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="only root can give a directory to another user")
def test_directory_owned_by_someone_else_is_refused(tmp_path, monkeypatch):
    """Another user pre-created the per-user fallback (private to them, so not writable by
    others): still refused, as it is theirs; with no safe place left, KernelCacheError."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    foreign = tmp_path / "tmp" / f"duograph-{os.getuid()}"
    foreign.mkdir(mode=0o700)
    os.chown(foreign, 65534, 65534)
    hostile = tmp_path / "base"
    hostile.mkdir(mode=0o700)
    os.chown(hostile, 65534, 65534)
    with pytest.raises(KernelCacheError, match=r"owned by uid 65534, not by this user"):
        cache_dir(str(hostile))
    assert os.listdir(foreign) == [] and os.listdir(hostile) == []


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


_FUSED_SCRIPT = """
import numpy as np
import duograph as dg
g = dg.Graph("k")
with g:
    x = dg.placeholder("x", (64, 64), "float32")
    y = dg.exp(dg.tanh(x) * 2.0) + 1.0
exe = g.compile(outputs=[y], passes="O2")
a = np.linspace(-1, 1, 64 * 64, dtype=np.float32).reshape(64, 64)
with dg.config.override(fused_strategy="numba"):
    out, = exe(x=a)
np.testing.assert_allclose(out, np.exp(np.tanh(a) * 2.0) + 1.0, rtol=1e-5)
print("ok")
"""


@posix
def test_planted_files_in_the_real_cache_never_run(tmp_path):
    """End to end: a process fills the cache with generated numba kernels; every cached file is
    then replaced by code that leaves a marker; a fresh process running the same graph must
    run the real kernels (right numbers), never the planted ones, and restore the files."""
    pytest.importorskip("numba")
    import subprocess
    env = dict(os.environ, DUOGRAPH_CACHE_DIR=str(tmp_path / "cache"))

    def run():
        proc = subprocess.run([sys.executable, "-c", _FUSED_SCRIPT], env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip().endswith("ok")

    run()
    folder = tmp_path / "cache" / "numba"
    planted = sorted(folder.glob("fused_*.py"))
    assert planted, "the first run cached no generated kernel"
    marker = tmp_path / "pwned"
    evil = (f"open({str(marker)!r}, 'w').write('ran')\n"
            "def kernel(*args):\n    raise SystemExit(3)\n")
    originals = {p: p.read_text() for p in planted}
    for p in planted:
        p.write_text(evil)
    run()
    assert not marker.exists()
    for p, text in originals.items():
        assert p.read_text() == text
