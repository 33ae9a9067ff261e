"""geomopt.io: a module and a geomopt.torch optimizer saved to geomopt's HDF5 checkpoint and loaded back continue the
run bit for bit; checkpoints move both ways between Python and a C++ program written as a C++ user writes it
(tests/python/checkpoint_tool.cpp), the continued runs equal bit for bit; the file holds PyTorch's dotted names as h5py
reads them; a bad file or a module that does not match raises and leaves every tensor and the optimizer's state as
they were."""

import os
import subprocess

import h5py
import numpy as np
import pytest
import torch

import geomopt
import geomopt.io
import geomopt.torch as gt

TOOL = os.environ.get("GEOMOPT_CHECKPOINT_TOOL")
LR, WEIGHT_DECAY = 1e-2, 0.1  # the C++ tool's Adam
SHAPES = [(2, 6), (6, 2), (3, 4), (3,)]  # Net's parameters() order: its own (frame, tall), then fc's


class Net(torch.nn.Module):
    """fc (Linear 4 -> 3), a wide Stiefel frame (2 x 6, orthonormal rows), a tall one (6 x 2, orthonormal columns) and
    an int64 step counter buffer, as checkpoint_tool.cpp's tree."""

    def __init__(self, seed=11):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.fc = torch.nn.Linear(4, 3)
        with torch.no_grad():
            self.fc.weight.copy_(torch.randn(3, 4, generator=g))
            self.fc.bias.copy_(torch.randn(3, generator=g))
        q, _ = torch.linalg.qr(torch.randn(6, 2, generator=g, dtype=torch.float64))
        self.frame = gt.ManifoldParameter(q.T.contiguous().float(), manifold=geomopt.Stiefel())
        self.tall = gt.ManifoldParameter(q.flip(1).contiguous().float(), manifold=geomopt.Stiefel())
        self.register_buffer("seen", torch.zeros((), dtype=torch.int64))


def gradients(steps, seed=12):
    g = torch.Generator().manual_seed(seed)
    return [[torch.randn(s, generator=g) for s in SHAPES] for _ in range(steps)]


def run(net, opt, grads):
    for step in grads:
        for p, t in zip(net.parameters(), step):
            p.grad = t.clone()
        opt.step()
        net.seen += 1


def numbers(net, opt):
    """Every number of the run, as bytes: parameters, buffers, and the optimizer's state tensors."""
    out = [t.detach().numpy().tobytes() for t in list(net.parameters()) + list(net.buffers())]
    for s in opt.state_dict()["state"].values():
        out += [v.numpy().tobytes() if torch.is_tensor(v) else repr(v).encode() for _, v in sorted(s.items())]
    return out


def blob(tensors):
    return np.concatenate([t.detach().numpy().ravel() for t in tensors]).astype(np.float32).tobytes()


def fresh(seed=99):
    net = Net(seed)
    return net, gt.Adam(net.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)


@pytest.fixture
def reference():
    """The uninterrupted run: 2 x 4 steps."""
    grads = gradients(8)
    net, opt = fresh(11)
    start = [p.detach().clone() for p in net.parameters()]
    run(net, opt, grads)
    return start, grads, numbers(net, opt)


def test_save_load_resume_is_bitwise(tmp_path, reference):
    _, grads, expected = reference
    net, opt = fresh(11)
    run(net, opt, grads[:4])
    geomopt.io.save(tmp_path / "ckpt.h5", net, opt, attributes={"epoch": 3, "note": "half"})
    net2, opt2 = fresh()
    report = geomopt.io.load(tmp_path / "ckpt.h5", net2, opt2)
    assert report["metadata"] == {"step": 4, "epoch": 3, "note": "half"}
    assert sorted(report["loaded"]) == ["fc.bias", "fc.weight", "frame", "seen", "tall"]
    assert report["missing"] == [] and report["unexpected"] == []
    assert numbers(net2, opt2) == numbers(net, opt)
    run(net2, opt2, grads[4:])
    assert numbers(net2, opt2) == expected


def test_the_file_holds_torch_names_and_shapes_as_h5py_reads_them(tmp_path):
    net, opt = fresh(11)
    run(net, opt, gradients(2))
    geomopt.io.save(tmp_path / "ckpt.h5", net, opt)
    with h5py.File(tmp_path / "ckpt.h5", "r") as f:
        params = f["params"]
        assert sorted(params) == ["fc.bias", "fc.weight", "frame", "seen", "tall"]
        np.testing.assert_array_equal(params["fc.weight"][()], net.fc.weight.detach().numpy())
        np.testing.assert_array_equal(params["fc.bias"][()], net.fc.bias.detach().numpy())
        assert params["seen"][()].tolist() == [2]


@pytest.mark.skipif(TOOL is None, reason="GEOMOPT_CHECKPOINT_TOOL is not set (CTest sets it)")
def test_a_checkpoint_written_in_cpp_resumes_in_python_bitwise(tmp_path, reference):
    start, grads, expected = reference
    (tmp_path / "start.bin").write_bytes(blob(start))
    (tmp_path / "grads.bin").write_bytes(b"".join(blob(step) for step in grads[:4]))
    subprocess.run([TOOL, "start", tmp_path / "start.bin", tmp_path / "grads.bin", "4", tmp_path / "cpp.h5"],
                   check=True)
    net, opt = fresh()
    report = geomopt.io.load(tmp_path / "cpp.h5", net, opt)
    assert report["differences"] == [] and report["missing"] == []
    assert net.seen.item() == 4
    run(net, opt, grads[4:])
    assert numbers(net, opt) == expected


@pytest.mark.skipif(TOOL is None, reason="GEOMOPT_CHECKPOINT_TOOL is not set (CTest sets it)")
def test_a_checkpoint_written_in_python_resumes_in_cpp_bitwise(tmp_path, reference):
    _, grads, expected = reference
    net, opt = fresh(11)
    run(net, opt, grads[:4])
    geomopt.io.save(tmp_path / "python.h5", net, opt)
    (tmp_path / "grads.bin").write_bytes(b"".join(blob(step) for step in grads[4:]))
    subprocess.run([TOOL, "resume", tmp_path / "python.h5", tmp_path / "grads.bin", "4", tmp_path / "cpp.h5"],
                   check=True)
    net2, opt2 = fresh()
    geomopt.io.load(tmp_path / "cpp.h5", net2, opt2)
    assert numbers(net2, opt2) == expected


def test_a_module_alone_round_trips(tmp_path):
    net, _ = fresh(11)
    geomopt.io.save(tmp_path / "weights.h5", net)
    net2, _ = fresh()
    report = geomopt.io.load(tmp_path / "weights.h5", net2)
    assert report["state"] == []
    for a, b in zip(net.state_dict().values(), net2.state_dict().values()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("damage", ["truncated", "flipped", "other_shape", "other_settings", "missing"])
def test_a_bad_load_raises_and_changes_nothing(tmp_path, damage):
    net, opt = fresh(11)
    run(net, opt, gradients(3))
    path = tmp_path / "ckpt.h5"
    geomopt.io.save(path, net, opt)
    target, target_opt = fresh()
    run(target, target_opt, gradients(2, seed=5))
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif damage == "flipped":
        # A number of the file: the first of fc.weight's dataset, found by its bytes.
        data = bytearray(path.read_bytes())
        at = data.find(net.fc.weight.detach().numpy().tobytes())
        assert at > 0
        data[at] ^= 0x01
        path.write_bytes(bytes(data))
    elif damage == "other_shape":
        target.fc = torch.nn.Linear(5, 3)
        target_opt = gt.Adam(target.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    elif damage == "other_settings":
        target_opt = gt.Adam(target.parameters(), lr=LR, betas=(0.8, 0.999), weight_decay=WEIGHT_DECAY)
        run(target, target_opt, gradients(1, seed=6))
    elif damage == "missing":
        target.extra = torch.nn.Parameter(torch.ones(2))
        target_opt = gt.Adam(target.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    before = numbers(target, target_opt)
    with pytest.raises((geomopt.io.CheckpointError, ValueError)) as error:
        geomopt.io.load(path, target, target_opt)
    if damage in ("other_shape", "missing"):
        assert ("fc.weight" if damage == "other_shape" else "extra") in str(error.value)
    assert numbers(target, target_opt) == before


def test_save_refuses_what_it_cannot_write_and_leaves_the_old_file(tmp_path):
    net, opt = fresh(11)
    path = tmp_path / "ckpt.h5"
    geomopt.io.save(path, net, opt)
    old = path.read_bytes()
    other = Net()
    with pytest.raises(ValueError, match="not a parameter of the module"):
        geomopt.io.save(path, other, opt)
    with pytest.raises(TypeError, match="torch.nn.Module"):
        geomopt.io.save(path, {"w": torch.zeros(2)}, opt)
    net.fc.weight.data = net.fc.weight.data.T  # not contiguous
    with pytest.raises(ValueError, match="'fc.weight' is not contiguous"):
        geomopt.io.save(path, net, opt)
    assert path.read_bytes() == old


def test_a_manifold_muon_run_resumes_bitwise_with_groups_and_a_skipped_step(tmp_path):
    # fc.weight takes Muon's step, the frames ManifoldMuon's, fc.bias AdamW's; the frames' group has its own rates,
    # and fc.weight sits step 2 out.
    grads = gradients(8, seed=21)

    def make():
        net = Net(11)
        opt = gt.ManifoldMuon([{"params": [net.frame, net.tall], "lr": 0.05},
                               {"params": [net.fc.weight, net.fc.bias], "adamw_lr": 2e-3}],
                              lr=0.02, weight_decay=0.05, adamw_lr=1e-3)
        return net, opt

    def steps(net, opt, ks):
        for k in ks:
            for p, t in zip(net.parameters(), grads[k]):
                p.grad = None if (k == 2 and p is net.fc.weight) else t.clone()
            opt.step()

    net, opt = make()
    steps(net, opt, range(8))
    expected = numbers(net, opt)
    net1, opt1 = make()
    steps(net1, opt1, range(4))
    geomopt.io.save(tmp_path / "muon.h5", net1, opt1)
    with h5py.File(tmp_path / "muon.h5", "r") as f:
        names = []
        f.visit(names.append)
        options = dict(f["optimizer"].attrs)
    assert any("fc.weight" in n and n.endswith("momentum_buffer") for n in names)
    assert any("fc.bias" in n and n.endswith("exp_avg") for n in names)
    # Every option that changes the trajectory is recorded, an enumerated one by its name.
    for name, value in {"retraction": "polar", "stiefel_method": "fixed_point", "msign": "newton_schulz",
                        "scale": "original", "non_finite": "propagate", "fallback.AdamW.section": "recomputed",
                        "stiefel_max_iterations": 1.0, "clip_norm": 0.0}.items():
        assert options[name] == value, name
    net2, opt2 = make()
    geomopt.io.load(tmp_path / "muon.h5", net2, opt2)
    assert int(opt2.state[net2.fc.weight]["step"]) == 3
    steps(net2, opt2, range(4, 8))
    assert numbers(net2, opt2) == expected
    # Another retraction is refused by name.
    net4 = Net(11)
    cayley = gt.ManifoldMuon([{"params": [net4.frame, net4.tall], "lr": 0.05},
                              {"params": [net4.fc.weight, net4.fc.bias], "adamw_lr": 2e-3}],
                             lr=0.02, weight_decay=0.05, adamw_lr=1e-3, stiefel_retraction="cayley")
    with pytest.raises(geomopt.io.CheckpointError, match='retraction is "polar" in the file, "cayley" here'):
        geomopt.io.load(tmp_path / "muon.h5", net4, cayley)
    # Another optimizer's file is refused, naming the difference, and changes nothing.
    net3, adam = fresh()
    before = numbers(net3, adam)
    with pytest.raises(geomopt.io.CheckpointError):
        geomopt.io.load(tmp_path / "muon.h5", net3, adam)
    assert numbers(net3, adam) == before
