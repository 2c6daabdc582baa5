"""``duograph.autograd`` as a package with ``torch.autograd``'s names."""
import numpy as np
import pytest

import duograph as dg


def test_the_package_imports_with_pytorchs_names():
    import duograph.autograd as ag
    from duograph.autograd import (Function, Variable, backward, grad, gradcheck,  # noqa
                                   gradgradcheck)
    assert dg.autograd is ag
    assert ag.grad is dg.eager.autograd.grad and ag.Function is dg.eager.autograd.Function
    assert issubclass(ag.GradcheckError, RuntimeError)


def test_variable_is_a_new_leaf_sharing_memory_as_pytorch():
    from duograph.autograd import Variable
    x = dg.ones(3)
    v = Variable(x, requires_grad=True)
    assert v is not x and v.requires_grad and not x.requires_grad
    x.add_(1.0)
    np.testing.assert_array_equal(v.detach().numpy(), [2.0, 2.0, 2.0])   # shared data
    y = dg.ones(2, requires_grad=True) * 2
    w = Variable(y)
    assert not w.requires_grad and w.grad_fn is None
    with pytest.raises(TypeError, match="has to be a tensor, but got list"):
        Variable([1.0, 2.0])
    (v * v).sum().backward()
    np.testing.assert_array_equal(v.grad.numpy(), [4.0, 4.0, 4.0])


def test_backward_through_the_package():
    from duograph.autograd import backward
    x = dg.tensor([1.0, 2.0], requires_grad=True)
    backward([(x ** 3).sum()])
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 12.0])


def test_gradcheck_and_gradgradcheck_pass_and_fail():
    from duograph.autograd import GradcheckError, gradcheck, gradgradcheck
    dg.manual_seed(0)
    a = dg.randn(3, dtype="float64", requires_grad=True)
    b = dg.randn(3, dtype="float64", requires_grad=True)
    assert gradcheck(lambda x, y: dg.sin(x) * y ** 2, (a, b))
    assert gradgradcheck(lambda x, y: dg.sin(x) * y ** 2, (a, b))
    assert gradgradcheck(lambda x: (dg.tanh(x), x ** 3), [a],
                         [dg.randn(3, dtype="float64", requires_grad=True),
                          dg.randn(3, dtype="float64", requires_grad=True)], atol=1e-4)

    class BadSecond(dg.autograd.Function):
        """x**2 whose backward is right at first order but is not differentiable
        consistently (it uses a detached x)."""
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return g * 2 * x.detach()

    assert gradcheck(BadSecond.apply, (a,))
    assert not gradgradcheck(BadSecond.apply, (a,), raise_exception=False)
    with pytest.raises(GradcheckError):
        gradgradcheck(BadSecond.apply, (a,))
    with pytest.raises(NotImplementedError, match="check_batched_grad"):
        gradgradcheck(lambda x: x * 2, (a,), check_batched_grad=True)
    with pytest.raises(ValueError, match="requires grad"):
        gradgradcheck(lambda x: x * 2, (dg.ones(2, dtype="float64"),))
