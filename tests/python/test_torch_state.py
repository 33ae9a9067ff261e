"""geomopt.torch's state: torch.save / torch.load of state_dict() resume bit for bit (N steps, save, load into a fresh
model and optimizer, N more equals 2N), with manifold parameters, a moving average, missing gradients, parameter
groups and a scheduler; add_param_group keeps the state of the parameters already there."""

import io

import torch

import geomopt
import geomopt.torch as gt


def model(seed=0):
    torch.manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(8, 3, dtype=torch.float64))
    return [
        torch.nn.Parameter(torch.randn(4, 3, dtype=torch.float64)),
        gt.ManifoldParameter(q.T.contiguous(), manifold=geomopt.Stiefel()),  # 3 x 8, orthonormal rows
        gt.ManifoldParameter(q.contiguous(), manifold=geomopt.Stiefel()),  # 8 x 3, tall
        torch.nn.Parameter(torch.randn(5, dtype=torch.float64)),
    ]


def grads(params, k):
    g = torch.Generator().manual_seed(100 + k)
    for i, p in enumerate(params):
        p.grad = None if (k % 3 == 1 and i == 3) else torch.randn(p.shape, generator=g, dtype=p.dtype)


def make_opt(params):
    opt = gt.Adam([{"params": params[:2]}, {"params": params[2:], "lr": 5e-3}], lr=1e-2, ema_decay=0.9)
    return opt, torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)


def run(params, opt, sched, start, stop):
    for k in range(start, stop):
        grads(params, k)
        opt.step()
        sched.step()


def test_state_dict_round_trip_resumes_bitwise():
    n = 7
    a = model()
    oa, sa = make_opt(a)
    run(a, oa, sa, 0, 2 * n)

    b = model()
    ob, sb = make_opt(b)
    run(b, ob, sb, 0, n)
    buffer = io.BytesIO()
    torch.save({"params": [p.detach().clone() for p in b], "opt": ob.state_dict(), "sched": sb.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer)

    c = model(seed=5)  # a fresh process: other values
    with torch.no_grad():
        for p, v in zip(c, saved["params"]):
            p.copy_(v)
    oc, sc = make_opt(c)
    oc.load_state_dict(saved["opt"])
    sc.load_state_dict(saved["sched"])
    run(c, oc, sc, n, 2 * n)

    for x, y in zip(a, c):
        assert torch.equal(x, y)
    da, dc = oa.state_dict()["state"], oc.state_dict()["state"]
    assert sorted(da) == sorted(dc)
    for i in da:
        for key in da[i]:
            assert torch.equal(torch.as_tensor(da[i][key]), torch.as_tensor(dc[i][key])), (i, key)
    assert float(dc[3]["step"]) < float(dc[0]["step"])  # parameter 3 sat steps out


def test_state_tensors_are_live_views():
    p = torch.nn.Parameter(torch.ones(3, dtype=torch.float64))
    opt = gt.Adam([p], lr=0.1)
    state = opt.state[p]
    p.grad = torch.full((3,), 2.0, dtype=torch.float64)
    opt.step()
    assert float(state["step"]) == 1
    assert torch.allclose(state["exp_avg"], torch.full((3,), 0.2, dtype=torch.float64))


def test_add_param_group_keeps_the_state_of_the_others():
    a, b = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(3))
    opt = gt.Adam([a], lr=0.1)
    a.grad = torch.ones(2)
    opt.step()
    before = opt.state[a]["exp_avg"].clone()
    opt.add_param_group({"params": [b], "lr": 0.01})
    assert torch.equal(opt.state[a]["exp_avg"], before)
    assert float(opt.state[a]["step"]) == 1
    assert float(opt.state[b]["step"]) == 0
    b.grad = torch.ones(3)
    a.grad = torch.ones(2)
    opt.step()
    assert float(opt.state[a]["step"]) == 2 and float(opt.state[b]["step"]) == 1


def test_a_torch_state_dict_loads():
    """A torch.optim.Adam state dict continues in geomopt.torch.Adam as in torch.optim.Adam (to rounding)."""
    p, q = (torch.nn.Parameter(torch.linspace(-1, 1, 6, dtype=torch.float64)) for _ in range(2))
    ref = torch.optim.Adam([p], lr=0.01)
    for k in range(3):
        p.grad = torch.sin(p.detach() + k)
        ref.step()
    with torch.no_grad():
        q.copy_(p)
    ours = gt.Adam([q], lr=0.01)
    ours.load_state_dict(ref.state_dict())
    for k in range(3, 6):
        p.grad = torch.sin(p.detach() + k)
        q.grad = torch.sin(q.detach() + k)
        ref.step()
        ours.step()
    assert torch.allclose(p, q, rtol=1e-13, atol=0)
