"""Launching test scripts on several MPI ranks (``mpiexec -n N``), for the distributed tests.

``run_ranks(n, code, tmp_path)`` writes ``code`` to a script and runs it under mpiexec with
this interpreter, a time limit, and BLAS on one thread per rank; it returns the finished
process (returncode, stdout, stderr). Tests skip where mpi4py or mpiexec is missing."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest


def mpiexec() -> str:
    pytest.importorskip("mpi4py", reason="needs mpi4py: pip install 'duograph[distributed]'")
    found = shutil.which("mpiexec", path=os.path.dirname(sys.executable) + os.pathsep +
                         os.environ.get("PATH", ""))
    if found is None:
        pytest.skip("needs mpiexec (pip install mpich)")
    return found


def run_ranks(n: int, code: str, tmp_path, timeout: float = 60, args=()):
    exe = mpiexec()
    script = tmp_path / f"ranks_{abs(hash(code)) % 10**8}.py"
    script.write_text(textwrap.dedent(code))
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return subprocess.run([exe, "-n", str(n), sys.executable, str(script), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=str(tmp_path))
