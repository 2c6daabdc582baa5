"""Errors raised at the user, each naming what was expected, what was found and where.

Each class is also the built-in exception PyTorch raises for the same mistake, so code written
to catch torch's exceptions catches duograph's (``tests/test_torch_exceptions.py`` checks it
mistake by mistake against torch): a shape mismatch is a ``RuntimeError`` (and, as it always
was here, a ``ValueError``), a dim out of range an ``IndexError``, a dtype an op refuses a
``RuntimeError`` (and a ``TypeError``), an index out of bounds an ``IndexError``.
"""
from __future__ import annotations

import functools

from .source import user_source


class DuographError(Exception):
    """Base class of every error duograph raises on purpose."""


class ShapeError(DuographError, ValueError, RuntimeError):
    """An op received operands whose shapes it cannot accept (also a ``RuntimeError``, as
    PyTorch raises for a shape mismatch)."""


class DimError(ShapeError, IndexError):
    """A dim out of range for the tensor's rank: also an ``IndexError``, as PyTorch raises
    ("Dimension out of range")."""


class IndexBoundsError(ShapeError, IndexError):
    """An index out of bounds for its dim (``x[5]`` of a 3-element tensor): also an
    ``IndexError``, as PyTorch raises."""


class DTypeError(DuographError, TypeError, RuntimeError):
    """An op received operands whose dtypes it cannot accept (also a ``RuntimeError``, as
    PyTorch raises for a dtype an op refuses)."""


class UnsupportedDTypeError(DTypeError, NotImplementedError):
    """An op has no kernel for a dtype (``&`` of floats, ``matmul`` of bools): also a
    ``NotImplementedError``, as PyTorch raises ("... not implemented for 'Float'")."""


class GraphError(DuographError, RuntimeError):
    """The IR is malformed, or a Value was used outside the graph that owns it (also a
    ``RuntimeError``, as PyTorch raises for misuse of its autograd graph)."""


class FeedError(DuographError, ValueError):
    """A feed given to an executable is missing, extra, or of the wrong type or shape."""


class KernelError(DuographError, RuntimeError):
    """A kernel failed while running; the message names the op and its source line."""


class KernelIndexError(KernelError, IndexError):
    """A kernel refused an index (out of bounds): also an ``IndexError``, as PyTorch raises
    for ``index_select`` and friends."""


class LinAlgError(KernelError):
    """A linear-algebra kernel met a matrix it cannot handle (singular for ``inv`` and
    ``solve``, not positive-definite for ``cholesky``): a ``RuntimeError``, as PyTorch's
    ``torch.linalg.LinAlgError`` is."""


def kernel_error(message: str, cause: BaseException) -> KernelError:
    """The KernelError for a kernel that raised ``cause``: an index refused stays an
    IndexError too, and a LinAlgError stays one, so code catching PyTorch's exception
    catches ours."""
    if isinstance(cause, LinAlgError):
        return LinAlgError(message)
    return (KernelIndexError if isinstance(cause, IndexError) else KernelError)(message)


def located(message: str) -> str:
    """``message`` followed by the user's line (once): for errors an op function raises while
    checking its arguments, before graph building or eager dispatch would add the line."""
    if "\n  in: " in message:
        return message
    source = user_source()
    return f"{message}\n  in: {source}" if source else message


def composite(name: str):
    """Decorator for a public op function written with other ops (``argsort`` with ``sort``,
    ``max_pool1d`` with ``max_pool2d``): an error an inner op raises names that op, so it is
    re-raised (same class, same traceback) naming the function the user called first:
    ``argsort: sort: expected input to be a tensor...``; a message that already starts with
    ``name:`` is left alone, and so is any other exception."""
    prefix = f"{name}:"

    def wrap(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except (DuographError, TypeError, ValueError, IndexError, RuntimeError,
                    NotImplementedError) as e:
                if e.args and isinstance(e.args[0], str) and not e.args[0].startswith(prefix):
                    e.args = (located(f"{name}: {e.args[0]}"),) + e.args[1:]
                raise
        return wrapper
    return wrap


def op_error(cls, op: str, message: str, source=None, detail: str = ""):
    """Build an error for `op` that points at the user's line."""
    where = f"\n  in: {source}" if source else ""
    extra = f"\n  {detail}" if detail else ""
    return cls(f"{op}: {message}{extra}{where}")
