"""Bad input to geomopt.torch: each gives TypeError or ValueError naming the parameter (group, index, and name when
the optimizer was given named_parameters()) and what was expected, and changes no parameter and no state."""

import pytest
import torch

import geomopt
import geomopt.torch as gt


class Net(torch.nn.Module):
    """named_parameters() order: frame (a parameter of the module itself), fc.weight, fc.bias."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
        q, _ = torch.linalg.qr(torch.randn(6, 2))
        self.frame = gt.ManifoldParameter(q.T.contiguous(), manifold=geomopt.Stiefel())


def stepped():
    torch.manual_seed(0)
    net = Net()
    opt = gt.Adam(net.named_parameters(), lr=0.1)
    for p in net.parameters():
        p.grad = torch.ones_like(p)
    opt.step()
    return net, opt


def snapshot(net, opt):
    return [p.detach().clone() for p in net.parameters()], {
        i: {k: torch.as_tensor(v).clone() for k, v in s.items()} for i, s in opt.state_dict()["state"].items()}


def unchanged(before, after):
    (p0, s0), (p1, s1) = before, after
    assert all(torch.equal(a, b) for a, b in zip(p0, p1))
    assert all(torch.equal(s0[i][k], s1[i][k]) for i in s0 for k in s0[i])


def test_construction_refuses_bad_parameters_naming_them():
    with pytest.raises(TypeError, match=r"group 0, parameter 1: the parameter is torch.float16"):
        gt.Adam([torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2, dtype=torch.float16))])
    with pytest.raises(TypeError, match=r"group 0, parameter 0: the parameter is on meta"):
        gt.SGD([torch.nn.Parameter(torch.zeros(2, device="meta"))], lr=0.1)
    with pytest.raises(ValueError, match=r"group 1, parameter 0: the parameter is not contiguous"):
        gt.Adam([{"params": [torch.nn.Parameter(torch.zeros(2))]},
                 {"params": [torch.nn.Parameter(torch.zeros(3, 4).t())]}])
    off = gt.ManifoldParameter(torch.ones(2, 5), manifold=geomopt.Stiefel())
    with pytest.raises(ValueError, match=r"group 0, parameter 0 \('w'\): not a point of Stiefel"):
        gt.Adam([("w", off)])
    with pytest.raises(ValueError, match=r"parameter 0: SpecialOrthogonal needs a non-empty square matrix, got"):
        gt.Adam([gt.ManifoldParameter(torch.eye(2, 3), manifold=geomopt.SpecialOrthogonal())])
    with pytest.raises(ValueError, match=r"Invalid non_finite value"):
        gt.Adam([torch.nn.Parameter(torch.zeros(2))], non_finite="ignore")
    with pytest.raises(ValueError, match=r"maximize=True is not supported"):
        gt.Adam([torch.nn.Parameter(torch.zeros(2))], maximize=True)


@pytest.mark.parametrize("case", ["dtype", "shape", "noncontiguous", "sparse", "param_shape"])
def test_a_bad_gradient_or_parameter_at_step_changes_nothing(case):
    net, opt = stepped()
    before = snapshot(net, opt)
    for p in net.parameters():
        p.grad = torch.full_like(p, 0.5)
    w = net.fc.weight
    # torch refuses to assign a gradient of another dtype or shape to .grad; .grad.data takes it, as a bug might.
    if case == "dtype":
        w.grad.data = w.grad.double()
        error, words = TypeError, r"group 0, parameter 1 \('fc.weight'\): the gradient is torch.float64"
    elif case == "shape":
        w.grad.data = torch.zeros(4, 3)
        error, words = ValueError, r"\('fc.weight'\): the gradient has shape \(4, 3\), the parameter \(3, 4\)"
    elif case == "noncontiguous":
        w.grad = torch.zeros(4, 3).t()
        error, words = ValueError, r"\('fc.weight'\): the gradient is not contiguous"
    elif case == "sparse":
        w.grad = torch.zeros(3, 4).to_sparse()
        error, words = TypeError, r"\('fc.weight'\): the gradient is a sparse tensor"
    else:
        net.fc.bias.data = torch.zeros(5)
        before[0][2] = net.fc.bias.detach().clone()
        error, words = ValueError, r"\('fc.bias'\): the parameter is torch.float32 \(5,\), it was torch.float32 \(3,\)"
    with pytest.raises(error, match=words):
        opt.step()
    unchanged(before, snapshot(net, opt))


def test_a_bad_state_dict_changes_nothing():
    net, opt = stepped()
    sd = opt.state_dict()
    before = snapshot(net, opt)
    bad = {"state": {k: dict(v) for k, v in sd["state"].items()}, "param_groups": sd["param_groups"]}
    bad["state"][0]["exp_avg"] = torch.zeros(7)  # the frame's tangent coordinates are 9
    with pytest.raises(ValueError, match=r"\('frame'\): the loaded 'exp_avg' has shape \(7,\), expected \(9,\)"):
        opt.load_state_dict(bad)
    unchanged(before, snapshot(net, opt))
    with pytest.raises(ValueError, match="different number of parameter groups"):
        opt.load_state_dict({"state": {}, "param_groups": sd["param_groups"] * 2})
    unchanged(before, snapshot(net, opt))


def test_a_non_finite_gradient_under_skip_and_raise():
    for policy in ("skip", "raise"):
        torch.manual_seed(0)
        net = Net()
        opt = gt.Adam(net.named_parameters(), lr=0.1, non_finite=policy)
        for p in net.parameters():
            p.grad = torch.ones_like(p)
        opt.step()
        before = snapshot(net, opt)
        net.fc.bias.grad[1] = float("nan")
        if policy == "raise":
            with pytest.raises(ValueError, match=r"\('fc.bias'\): the gradient is not finite; nothing was changed"):
                opt.step()
        else:
            opt.step()
            assert not opt.last_report.applied
            assert opt.last_report.non_finite_parameter == "group 0, parameter 2 ('fc.bias')"
        unchanged(before, snapshot(net, opt))
