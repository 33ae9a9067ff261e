#!/usr/bin/python3
"""Interop of geomopt::io with h5py (run by CTest with Debian's /usr/bin/python3).

  interop.py TOOL WORKDIR

1. TOOL writes a checkpoint; h5py finds every parameter by its dotted path (the `path` attribute and the nested
   groups), with the shape and the values of the closed form below, the tie as one object under two names, the
   buffer marked non-trainable, the frozen leaf marked non-trainable and frozen (and without state arrays), the
   optimizer's attributes (per-leaf options among them) and state arrays, and the metadata; every checksum is
   recomputed with Python's zlib.crc32.
2. h5py writes files in the documented layout (docs/file_format.md), one with PyTorch-style names such as
   `0.weight` (nested groups and flat dotted names), one with a hard link, a SymmetricMatrix group and an int64
   buffer; TOOL loads them into matching trees and checks the same closed form. A file with a wrong shape must fail.
   The PyTorch-style file is also written with a 512-byte user block, with big-endian floats and with chunked gzip
   storage: the loader reads plain contiguous data straight from the file and must notice each of these.
Exits 77 (skipped) when this interpreter has no h5py or numpy.
"""
import os
import struct
import subprocess
import sys
import zlib

try:
    import h5py
    import numpy as np
except ImportError as e:
    print(f"skipped: {sys.executable} cannot import h5py/numpy ({e}); install python3-h5py python3-numpy")
    sys.exit(77)


def closed_form(path, shape):
    """(sum of the path's bytes mod 89) + k / 2, k the row-major index: what TOOL computes too."""
    base = sum(path.encode()) % 89
    n = int(np.prod(shape)) if shape else 1
    return (base + 0.5 * np.arange(n)).reshape(shape)


failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def read_checkpoint(tool, work):
    ckpt = os.path.join(work, "checkpoint.h5")
    subprocess.run([tool, "write", ckpt], check=True)
    # dotted path -> (shape, dtype, trainable, structured type or None); scale is frozen, counts a buffer
    expected = {
        "layers.0.weight": ((4, 3), np.float32, True, None),
        "layers.0.bias": ((4,), np.float32, True, None),
        "layers.1.weight": ((2, 4), np.float32, True, None),
        "layers.1.bias": ((2,), np.float32, True, None),
        "sym": ((6,), np.float32, True, "SymmetricMatrix"),
        "st": ((4, 2), np.float32, True, "Stiefel"),
        "emb": ((3, 5), np.float32, True, None),
        "scale": ((), np.float32, False, None),
        "counts": ((3,), np.int32, False, None),
    }
    with h5py.File(ckpt, "r") as f:
        check(f.attrs["format"] == "geomopt", "root attribute format")
        by_path = {}

        def visit(name, obj):  # (a visitor that returns anything but None stops the visit)
            if "path" in obj.attrs:
                by_path.setdefault(obj.attrs["path"], obj)

        f["params"].visititems(visit)
        check(set(by_path) == set(expected), f"dotted paths {sorted(by_path)}")
        for path, (shape, dtype, trainable, structured) in expected.items():
            obj = by_path.get(path)
            if obj is None:
                continue
            check(f["params/" + path.replace(".", "/")] == obj, f"{path}: nested groups lead to the same object")
            check(bool(obj.attrs["trainable"]) == trainable, f"{path}: trainable attribute")
            check(bool(obj.attrs.get("frozen", False)) == (path == "scale"), f"{path}: frozen attribute")
            if structured:
                check(isinstance(obj, h5py.Group) and obj.attrs["type"] == structured, f"{path}: type {structured}")
                data = obj["0"]
            else:
                check(isinstance(obj, h5py.Dataset), f"{path}: a dataset")
                data = obj
            check(data.shape == shape, f"{path}: shape {data.shape}, expected {shape}")
            check(data.dtype == dtype, f"{path}: dtype {data.dtype}, expected {np.dtype(dtype)}")
            check(np.array_equal(data[()], closed_form(path, shape).astype(dtype)), f"{path}: values")
        check(by_path["sym"].attrs["n"] == 3, "sym: metadata n")
        check(by_path["st"].attrs["N"] == 4 and by_path["st"].attrs["n"] == 2, "st: metadata N, n")
        check(f["params/head"] == f["params/emb"], "head is a hard link to emb")
        opt = f["optimizer"]
        check(opt.attrs["optimizer"] == "Adam" and opt.attrs["step"] == 3, "optimizer kind and step")
        check(opt.attrs["lr"] == 0.01, "optimizer hyperparameter lr")
        # Per-leaf options, "<dotted path>:<option>": every leaf's frozen, a stepped leaf's lr_scale, a weight decay the
        # rule set, a manifold leaf's retraction.
        check(opt.attrs["scale:frozen"] == 1 and "scale:lr_scale" not in opt.attrs, "scale: frozen, no other option")
        check(opt.attrs["layers.1.weight:frozen"] == 0 and opt.attrs["layers.1.weight:lr_scale"] == 0.5,
              "layers.1.weight: lr_scale 0.5")
        check(opt.attrs["layers.0.bias:weight_decay"] == 0.0 and "layers.1.bias:weight_decay" not in opt.attrs,
              "layers.0.bias: its own weight decay")
        check(opt.attrs["st:retraction"] == "cayley" and "emb:retraction" not in opt.attrs, "st: retraction")
        check("scale" not in opt, "scale: frozen, no state arrays")
        for path, (shape, _, trainable, structured) in expected.items():
            if not trainable:  # a buffer or a frozen leaf: no state
                continue
            state_shape = (5,) if path == "st" else shape  # St(4, 2) has dimension 5
            for slot in ("exp_avg", "exp_avg_sq"):
                d = opt[path.replace(".", "/") + "/" + slot]
                check(d.shape == state_shape, f"optimizer {path}.{slot}: shape {d.shape}")
                check(d.attrs["path"] == path + "." + slot, f"optimizer {path}.{slot}: path attribute")
        check(f["metadata"].attrs["epoch"] == 7 and f["metadata"].attrs["note"] == "interop", "metadata")
        verify_checksums(f)


def verify_checksums(f):
    """Every dataset's crc32 and every group's attributes_crc32, recomputed with Python's zlib alone, as
    docs/file_format.md ("Checksums") tells a reader to."""
    datasets = []
    f.visititems(lambda name, obj: datasets.append((name, obj)) if isinstance(obj, h5py.Dataset) else None)
    check(len(datasets) > 0, "the checkpoint has datasets")
    for name, d in datasets:
        data = np.ascontiguousarray(d[()])
        data = data.astype(data.dtype.newbyteorder("<"), copy=False)
        check("crc32" in d.attrs and zlib.crc32(data.tobytes()) == d.attrs["crc32"], f"{name}: crc32")
    for group in ("optimizer", "metadata"):
        attrs = f[group].attrs
        check(zlib.crc32(attributes_bytes(attrs)) == attrs["attributes_crc32"], f"/{group}: attributes_crc32")


def attributes_bytes(attrs):
    out = b""
    for name in sorted(k for k in attrs.keys() if k != "attributes_crc32"):
        value = attrs[name]
        out += name.encode() + b"\0"
        if isinstance(value, (bytes, str)):
            out += b"s" + (value.encode() if isinstance(value, str) else value) + b"\0"
        elif np.issubdtype(np.asarray(value).dtype, np.integer):
            out += b"i" + struct.pack("<q", int(value))
        else:
            out += b"f" + struct.pack("<d", float(value))
    return out


def write_torch_style(path, bad_shape=False, userblock=0, dtype="<f4", compression=None):
    state_dict = {  # torch.nn.Sequential(Linear(3, 4), Linear(4, 2)).state_dict() names and shapes
        "0.weight": (4, 3), "0.bias": (4,), "1.weight": (4, 2) if bad_shape else (2, 4), "1.bias": (2,)}
    with h5py.File(path, "w", userblock_size=userblock) as f:
        params = f.create_group("params")
        for name, shape in state_dict.items():
            data = closed_form(name, shape).astype(dtype)
            if name.startswith("0."):  # nested groups, as geomopt writes
                d = params.create_dataset(name.replace(".", "/"), data=data, compression=compression)
                d.attrs["path"] = name
            else:
                params.create_dataset(name, data=data, compression=compression)  # a flat dotted name


def write_extra(path):
    with h5py.File(path, "w") as f:
        params = f.create_group("params")
        params.create_dataset("a", data=closed_form("a", (3, 3)))
        params["b"] = params["a"]  # a hard link: the tie
        sym = params.create_group("sym")
        sym.attrs["type"] = "SymmetricMatrix"
        sym.attrs["n"] = np.int64(3)
        sym.create_dataset("0", data=closed_form("sym", (6,)))
        steps = params.create_dataset("steps", data=np.array([40, 41], dtype=np.int64))
        steps.attrs["trainable"] = False


def main():
    tool, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    read_checkpoint(tool, work)

    torch_file = os.path.join(work, "torch_style.h5")
    write_torch_style(torch_file)
    r = subprocess.run([tool, "read-torch", torch_file], capture_output=True, text=True)
    check(r.returncode == 0, f"read-torch: {r.stderr.strip()}")

    for variant, kwargs in {"userblock": {"userblock": 512}, "big_endian": {"dtype": ">f4"},
                            "gzip": {"compression": "gzip"}}.items():
        name = os.path.join(work, f"torch_{variant}.h5")
        write_torch_style(name, **kwargs)
        r = subprocess.run([tool, "read-torch", name], capture_output=True, text=True)
        check(r.returncode == 0, f"read-torch of the {variant} file: {r.stderr.strip()}")

    bad = os.path.join(work, "torch_bad.h5")
    write_torch_style(bad, bad_shape=True)
    r = subprocess.run([tool, "read-torch", bad], capture_output=True, text=True)
    check(r.returncode == 1 and "1.weight" in r.stderr and "shape" in r.stderr,
          f"a wrong shape must fail, naming 1.weight: {r.returncode} {r.stderr.strip()}")

    extra = os.path.join(work, "extra.h5")
    write_extra(extra)
    r = subprocess.run([tool, "read-extra", extra], capture_output=True, text=True)
    check(r.returncode == 0, f"read-extra: {r.stderr.strip()}")

    print(f"{len(failures)} failures" if failures else "all interop checks passed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
