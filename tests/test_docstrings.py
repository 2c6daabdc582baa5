"""Every public Tensor method, nn.Module method, creation function and public function of
``dg.__all__`` (and of the op functions) has a docstring, so ``help()`` is useful."""
import inspect

import pytest

import duograph as dg
from duograph.graphlib import functional as F

CREATION = ("tensor", "as_tensor", "from_numpy", "empty", "empty_like", "eye", "full",
            "full_like", "ones", "ones_like", "zeros", "zeros_like", "arange", "linspace",
            "rand", "rand_like", "randn", "randn_like", "randint", "randint_like")


def _doc(obj) -> str:
    return (getattr(obj, "__doc__", None) or "").strip()


def _public_methods(cls):
    """Public callables of ``cls`` (inherited ones included), by name."""
    return sorted(n for n in dir(cls) if not n.startswith("_")
                  and callable(getattr(cls, n, None)) and not inspect.isclass(getattr(cls, n)))


def _undocumented(owner, names):
    return [n for n in names if not _doc(getattr(owner, n))]


def test_every_public_tensor_method_has_a_docstring():
    names = _public_methods(dg.Tensor)
    assert len(names) > 200          # the surface really was scanned
    assert _undocumented(dg.Tensor, names) == []


def test_parameter_methods_have_docstrings():
    assert _undocumented(dg.nn.Parameter, _public_methods(dg.nn.Parameter)) == []


def test_every_public_module_method_has_a_docstring():
    names = _public_methods(dg.nn.Module)
    assert {"parameters", "train", "eval", "zero_grad", "forward", "apply"} <= set(names)
    assert _undocumented(dg.nn.Module, names) == []


@pytest.mark.parametrize("name", CREATION)
def test_creation_function_has_a_docstring(name):
    fn = getattr(dg, name)
    assert _doc(fn), f"dg.{name} has no docstring"
    assert name in dg.__all__


def test_every_function_of_dg_all_has_a_docstring():
    fns = [n for n in dg.__all__ if inspect.isfunction(getattr(dg, n))]
    assert len(fns) > 100
    assert _undocumented(dg, fns) == []


def test_every_op_function_has_a_docstring():
    fns = [n for n in F.__all__ if inspect.isfunction(getattr(F, n))]
    assert len(fns) > 100
    assert _undocumented(F, fns) == []


def test_method_docstrings_name_the_signature_and_dtype_rules():
    # spot checks of content, not only presence
    assert _doc(dg.Tensor.sum).startswith("``sum(dim=None, keepdim=False, dtype=None)")
    assert "int64" in _doc(dg.Tensor.sum)
    assert "In place" in _doc(dg.Tensor.add_) and "alpha" in _doc(dg.Tensor.add_)
    assert dg.Tensor.subtract_ is dg.Tensor.sub_ and "subtract_" in _doc(dg.Tensor.sub_)
    assert "float32" in _doc(dg.exp)
    assert "Args:" in _doc(dg.tensor) and "requires_grad" in _doc(dg.tensor)


def test_help_of_tensor_reads_like_pytorch():
    text = pydoc_text(dg.tensor)
    assert "A new tensor holding a copy of ``data``" in text
    assert "dtype" in text and "device" in text


def pydoc_text(obj) -> str:
    import pydoc
    return pydoc.render_doc(obj, renderer=pydoc.plaintext)


def _public_modules():
    import duograph.comparison
    import duograph.compiler
    import duograph.data
    import duograph.io
    import duograph.models
    import duograph.nn.utils
    import duograph.onnx
    import duograph.utils.data
    from duograph.optim import lr_scheduler
    return {"dg": dg, "dg.nn": dg.nn, "dg.nn.functional": dg.nn.functional,
            "dg.nn.init": dg.nn.init, "dg.optim": dg.optim,
            "dg.optim.lr_scheduler": lr_scheduler, "dg.linalg": dg.linalg,
            "dg.data": dg.data, "dg.utils.data": dg.utils.data, "dg.io": dg.io,
            "dg.onnx": dg.onnx, "dg.nn.utils": dg.nn.utils, "dg.compiler": dg.compiler,
            "dg.models": dg.models, "dg.comparison": dg.comparison}


def _names(module):
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in dir(module) if not n.startswith("_")
                 and getattr(getattr(module, n), "__module__", "").startswith("duograph")]
    return names


@pytest.mark.parametrize("modname", sorted(_public_modules()))
def test_public_classes_and_their_methods_have_docstrings(modname):
    """Every public function and class of the face modules, and every public method of those
    classes (``inspect.getdoc``: an override inherits its base's docstring, as in help())."""
    module = _public_modules()[modname]
    missing = []
    for name in _names(module):
        obj = getattr(module, name)
        if inspect.isfunction(obj) and not inspect.getdoc(obj):
            missing.append(name)
        if inspect.isclass(obj) and obj.__module__.startswith("duograph"):
            if not inspect.getdoc(obj):
                missing.append(name)
            for attr in dir(obj):
                fn = getattr(obj, attr, None)
                if not attr.startswith("_") and (inspect.isfunction(fn) or inspect.ismethod(fn)) \
                        and not inspect.getdoc(fn):
                    missing.append(f"{name}.{attr}")
    assert missing == [], f"{modname}: no docstring for {missing}"
