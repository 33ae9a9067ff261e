#!/usr/bin/python3
"""Fashion-MNIST with orthonormal hidden layers, written with torch.nn and autograd, by two routes side by side:

  geomopt     the hidden weights are geomopt.torch.ManifoldParameters on the Stiefel manifold (128 x 784 and 64 x 128,
              orthonormal rows), and geomopt.torch.Adam steps every parameter, the weights in their geometry;
  torch       the same network with torch.nn.utils.parametrizations.orthogonal on the hidden Linear layers and
              torch.optim.Adam on the unconstrained tensors.

The network is the C++ example's `stiefel` one (examples/fashion_mnist): 784 - 128 - 64 - 10, hidden layers
y = relu(g * (W x) + b) with W orthonormal and a Euclidean gain g and bias b, a free linear head; batch 256, Adam lr
2e-3 (the Stiefel weights at half that rate, a second param group) with 200 warm-up steps and a cosine to 0, one
thread. Both routes start from the same weights and see the same batches. Prints, per route, the test accuracy, the
training time (forward, backward and step of every batch; evaluation not counted) and max |W W^T - I|_F over the
hidden weights at the end, as a markdown table.

  /usr/bin/python3 examples/python/fashion_mnist.py [--epochs 10] [--train-limit N] [--routes geomopt,torch]
      with PYTHONPATH=<build>/python (or the package installed by scripts/install_python.sh)

Exits non-zero when a route's hidden weights end further than --max-defect from orthonormal, or its accuracy is below
--min-accuracy.
"""
import argparse
import gzip
import math
import pathlib
import sys
import time

import numpy as np
import torch

import geomopt
import geomopt.torch as gt

DATA = pathlib.Path("/usr/share/datasets/fashion-mnist")  # Debian's dataset-fashion-mnist
MEAN, STD = 0.2860, 0.3530  # the training set's pixel mean and standard deviation (of pixel / 255)
WIDTHS = (784, 128, 64)


def read_idx(name):
    with gzip.open(DATA / name) as f:
        data = f.read()
    dims = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(split, limit=None):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(f"{prefix}-images-idx3-ubyte.gz")[:limit]
    labels = read_idx(f"{prefix}-labels-idx1-ubyte.gz")[:limit]
    x = (torch.from_numpy(images.reshape(len(images), -1).astype(np.float32)) / 255 - MEAN) / STD
    return x, torch.from_numpy(labels.astype(np.int64))


class Net(torch.nn.Module):
    """Hidden layers relu(g * (W x) + b); `weights` makes each W: a ManifoldParameter or an orthogonal Linear."""

    def __init__(self, frames, route):
        super().__init__()
        self.route = route
        if route == "geomopt":
            self.w = torch.nn.ParameterList(gt.ManifoldParameter(f.clone(), manifold=geomopt.Stiefel())
                                            for f in frames)
        else:
            self.linears = torch.nn.ModuleList()
            for f in frames:
                layer = torch.nn.Linear(f.shape[1], f.shape[0], bias=False)
                torch.nn.utils.parametrizations.orthogonal(layer)
                layer.weight = f.clone()  # the parametrization's right inverse: the same starting frame
                self.linears.append(layer)
        self.gain = torch.nn.ParameterList(torch.nn.Parameter(torch.ones(f.shape[0])) for f in frames)
        self.bias = torch.nn.ParameterList(torch.nn.Parameter(torch.zeros(f.shape[0])) for f in frames)
        self.head = torch.nn.Linear(frames[-1].shape[0], 10)

    def weights(self):
        return list(self.w) if self.route == "geomopt" else [layer.weight for layer in self.linears]

    def forward(self, x):
        for w, g, b in zip(self.weights(), self.gain, self.bias):
            x = torch.relu(g * (x @ w.T) + b)
        return self.head(x)

    def param_groups(self, lr):
        frames = list(self.w) if self.route == "geomopt" else list(self.linears.parameters())
        others = list(self.gain) + list(self.bias) + list(self.head.parameters())
        return [{"params": frames, "lr": lr / 2}, {"params": others, "lr": lr}]


def cosine(total, warmup):
    def factor(t):
        if t < warmup:
            return (t + 1) / (warmup + 1)
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (t - warmup) / (total - warmup))))
    return factor


def train(route, frames, head, data, args):
    torch.manual_seed(args.seed)
    net = Net(frames, route)
    net.head.load_state_dict(head)
    x, y, x_test, y_test = data
    steps_per_epoch = math.ceil(len(x) / args.batch)
    total = args.epochs * steps_per_epoch
    groups = net.param_groups(args.lr)
    opt = gt.Adam(groups) if route == "geomopt" else torch.optim.Adam(groups, foreach=True)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, cosine(total, min(200, total // 10)))
    order = torch.Generator().manual_seed(args.seed)
    seconds = 0.0
    for _ in range(args.epochs):
        perm = torch.randperm(len(x), generator=order)
        t0 = time.perf_counter()
        for k in range(steps_per_epoch):
            batch = perm[k * args.batch:(k + 1) * args.batch]
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(net(x[batch]), y[batch]).backward()
            opt.step()
            sched.step()
        seconds += time.perf_counter() - t0
    with torch.no_grad():
        accuracy = (net(x_test).argmax(1) == y_test).double().mean().item()
        defect = max(torch.linalg.norm(w.double() @ w.double().T - torch.eye(w.shape[0], dtype=torch.float64)).item()
                     for w in net.weights())
    return accuracy, seconds, defect


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--train-limit", type=int, default=None, help="use the first N training images")
    ap.add_argument("--test-limit", type=int, default=None, help="use the first N test images")
    ap.add_argument("--routes", default="geomopt,torch")
    ap.add_argument("--max-defect", type=float, default=1e-4, help="largest |W W^T - I|_F accepted at the end")
    ap.add_argument("--min-accuracy", type=float, default=0.0, help="smallest test accuracy accepted, in %%")
    args = ap.parse_args()
    torch.set_num_threads(1)

    data = (*load("train", args.train_limit), *load("test", args.test_limit))
    gen = torch.Generator().manual_seed(args.seed)
    # Starting frames with orthonormal rows (out x in), and the head's weights, shared by both routes.
    frames = [torch.linalg.qr(torch.randn(n_in, n_out, generator=gen))[0].T.contiguous()
              for n_in, n_out in zip(WIDTHS, WIDTHS[1:])]
    head = torch.nn.Linear(WIDTHS[-1], 10).state_dict()

    print(f"Fashion-MNIST, {len(data[0])} training and {len(data[2])} test images, {args.epochs} epochs, batch "
          f"{args.batch}, Adam lr {args.lr} (Stiefel weights {args.lr / 2}), cosine schedule, one thread, torch "
          f"{torch.__version__}\n")
    print("| route | test accuracy | training time | max \\|W W^T - I\\|_F at the end |")
    print("|---|---|---|---|")
    failed = []
    names = {"geomopt": "geomopt.torch.Adam on Stiefel ManifoldParameters",
             "torch": "torch `orthogonal` parametrization + torch.optim.Adam"}
    for route in args.routes.split(","):
        accuracy, seconds, defect = train(route, frames, head, data, args)
        print(f"| {names[route]} | {100 * accuracy:.2f} % | {seconds:.1f} s | {defect:.1e} |", flush=True)
        if not defect <= args.max_defect:
            failed.append(f"{route}: |W W^T - I|_F = {defect:.3g} > {args.max_defect}")
        if not 100 * accuracy >= args.min_accuracy:
            failed.append(f"{route}: accuracy {100 * accuracy:.2f} % < {args.min_accuracy} %")
    if failed:
        sys.exit("fashion_mnist.py: " + "; ".join(failed))


if __name__ == "__main__":
    main()
