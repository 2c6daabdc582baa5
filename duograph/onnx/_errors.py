"""The import error of duograph.onnx, below every module of the package (the export error
is ``_export.OnnxExportError``)."""
from __future__ import annotations

from ..graphlib.errors import DuographError


class OnnxImportError(DuographError):
    """An ONNX model (or one of its nodes) cannot be imported exactly."""
