"""geomopt.torch: PyTorch optimizers that step every parameter in place in its own geometry, by geomopt's C++ step.

    import geomopt, geomopt.torch
    w = geomopt.torch.ManifoldParameter(torch.linalg.qr(torch.randn(64, 32))[0].T.contiguous(),
                                        manifold=geomopt.Stiefel())
    opt = geomopt.torch.Adam([w, bias], lr=1e-3)       # torch.optim.Adam's arguments and parameter groups
    loss.backward(); opt.step()                         # w stays on the Stiefel manifold

SGD, Adam, AdamW, RMSprop and Adagrad follow their torch.optim namesakes; Muon (torch.optim.Muon's arguments) and
ManifoldMuon step matrices (and ManifoldMuon's Stiefel, Sphere, SpecialOrthogonal, Grassmann and Oblique parameters) by
orthogonalized momentum and every other parameter by AdamW (``adamw_*`` options) in the same step.

Each optimizer is a ``torch.optim.Optimizer`` with torch's constructor arguments and parameter groups, plus geomopt's
common options (keyword-only): ``clip_norm`` (clip the gradients by their global norm, a manifold parameter's counted
by its Riemannian gradient), ``ema_decay`` (keep a moving average of the parameters), ``non_finite`` ('propagate',
'skip' or 'raise'), ``threads``, ``retraction`` (a group option too: 'cayley', 'geodesic' or 'second_order'), and
``section`` ('recomputed' or 'transported').

Contract:
  * ``step()`` is one call into C++ for every parameter: it reads each ``.grad`` and writes each parameter's storage in
    place (CPU, contiguous, float32 or float64); a parameter whose ``.grad`` is None is skipped, as in torch, and keeps
    its own step count.
  * Each group's ``lr`` and ``weight_decay`` (Muon's: also ``adamw_lr`` and ``adamw_weight_decay``) are read at every
    step, so ``torch.optim.lr_scheduler`` works. Weight decay does not apply to manifold parameters.
  * ``state_dict()`` / ``load_state_dict()`` use torch's layout: per parameter ``step`` and the kernel's arrays
    (``exp_avg``, ...; a manifold parameter's are its tangent coordinates, a vector), ``ema`` with ``ema_decay``, and
    ``param_groups``; so ``torch.save`` / ``torch.load`` resume bit for bit. The tensors in ``opt.state`` are views of
    the C++ state, current after every step.
  * Bad input (a CUDA, sparse or non-contiguous tensor, another dtype, a gradient of another shape, a shape changed
    since construction, a manifold parameter off its manifold at construction) raises TypeError or ValueError naming
    the parameter (group and index, and its name when the optimizer was given ``named_parameters()``) and what was
    expected, before anything is written.
"""

import collections
import math
import re

import torch
from torch.optim.optimizer import required as _required

from geomopt import _core
from geomopt._manifold import Manifold, euclidean_layout

__all__ = ["ManifoldParameter", "StepReport", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Muon", "ManifoldMuon"]

_DTYPES = (torch.float32, torch.float64)
_NON_FINITE = ("propagate", "skip", "raise")
_SECTIONS = ("recomputed", "transported")
_RETRACTIONS = (None, "cayley", "geodesic", "second_order")


class ManifoldParameter(torch.nn.Parameter):
    """A ``torch.nn.Parameter`` that lives on ``manifold`` (a ``geomopt.Manifold``); geomopt's optimizers step it in
    that geometry. Everything else treats it as a Parameter."""

    def __new__(cls, data=None, manifold=None, requires_grad=True):
        if data is None:
            data = torch.empty(0)
        if not isinstance(manifold, Manifold):
            raise TypeError(f"ManifoldParameter: manifold must be a geomopt.Manifold (geomopt.Stiefel(), ...), "
                            f"got {type(manifold).__name__}")
        instance = torch.Tensor._make_subclass(cls, data, requires_grad)
        instance.manifold = manifold
        return instance

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        result = type(self)(self.data.clone(memory_format=torch.preserve_format), self.manifold, self.requires_grad)
        memo[id(self)] = result
        return result

    def __reduce_ex__(self, proto):
        return ManifoldParameter, (self.data, self.manifold, self.requires_grad)

    def __repr__(self):
        return f"ManifoldParameter on {self.manifold!r} containing:\n{super().__repr__()}"


class _Spec:
    """What the optimizer knows of one parameter: where it is, what it is, and its name in messages."""

    __slots__ = ("param", "group", "position", "name", "shape", "dtype", "manifold", "rows", "cols", "transposed",
                 "matrices")

    def label(self):
        where = f"group {self.group}, parameter {self.position}"
        return f"{where} ('{self.name}')" if self.name else where


def _split_names(params):
    """torch's params argument, where named_parameters() pairs are also accepted: (param groups, names by id)."""
    names = {}

    def strip(items):
        out = []
        for item in items:
            if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
                names[id(item[1])] = item[0]
                out.append(item[1])
            else:
                out.append(item)
        return out

    if isinstance(params, torch.Tensor):
        raise TypeError("params argument given to the optimizer should be an iterable of Tensors or dicts, but got "
                        + torch.typename(params))
    params = list(params)
    if params and isinstance(params[0], dict):
        groups = []
        for g in params:
            g = dict(g)
            p = g["params"]
            g["params"] = strip([p] if isinstance(p, torch.Tensor) else list(p))
            groups.append(g)
        return groups, names
    return strip(params), names


class _GeomoptOptimizer(torch.optim.Optimizer):
    """What the optimizers share: the engines, the checks, the state views. A subclass sets _kernel and
    _kernel_options(group) (the group's kernel options by torch's names, as numbers)."""

    _kernel = None

    def __init__(self, params, defaults, *, clip_norm=0.0, ema_decay=0.0, non_finite="propagate", threads=1,
                 retraction=None, section="recomputed"):
        if not (clip_norm >= 0):
            raise ValueError(f"Invalid clip_norm value: {clip_norm} (0 turns clipping off)")
        if not (0 <= ema_decay < 1):
            raise ValueError(f"Invalid ema_decay value: {ema_decay} (in [0, 1); 0 turns the average off)")
        if non_finite not in _NON_FINITE:
            raise ValueError(f"Invalid non_finite value: {non_finite!r}; expected one of {_NON_FINITE}")
        if not (isinstance(threads, int) and 1 <= threads <= 256):
            raise ValueError(f"Invalid threads value: {threads!r} (an int from 1 to 256)")
        if section not in _SECTIONS:
            raise ValueError(f"Invalid section value: {section!r}; expected one of {_SECTIONS}")
        if retraction not in _RETRACTIONS:
            raise ValueError(f"Invalid retraction value: {retraction!r}; expected one of {_RETRACTIONS}")
        self._common = dict(clip_norm=float(clip_norm), ema_decay=float(ema_decay), non_finite=non_finite,
                            threads=threads, section=section)
        self._engines = None
        groups, self._names = _split_names(params)
        defaults = dict(defaults, retraction=retraction)
        super().__init__(groups, defaults)
        self._engines, self._specs, self._views = self._build(self.param_groups)
        self._install_views()
        #: What the last step did (a StepReport), None before the first.
        self.last_report = None

    # -- construction -------------------------------------------------------------------------------------------------

    def add_param_group(self, param_group):
        """torch's add_param_group; the new parameters get fresh state, the others keep theirs."""
        if isinstance(param_group, dict) and not isinstance(param_group.get("params"), torch.Tensor):
            param_group = dict(param_group)
            stripped, names = _split_names(list(param_group["params"]))
            param_group["params"] = stripped
            self._names.update(names)
        if self._engines is None:  # inside torch.optim.Optimizer.__init__
            return super().add_param_group(param_group)
        old_groups = list(self.param_groups)
        super().add_param_group(param_group)
        try:
            engines, specs, views = self._build(self.param_groups)
        except Exception:
            self.param_groups[:] = old_groups
            raise
        self._carry_state(engines, specs, views)
        self._engines, self._specs, self._views = engines, specs, views
        self._install_views()

    def _specs_of(self, groups):
        specs = []
        for g, group in enumerate(groups):
            if group.get("retraction") not in _RETRACTIONS:
                raise ValueError(f"group {g}: Invalid retraction value: {group.get('retraction')!r}; expected one "
                                 f"of {_RETRACTIONS}")
            for i, p in enumerate(group["params"]):
                s = _Spec()
                s.param, s.group, s.position, s.name = p, g, i, self._names.get(id(p))
                s.shape, s.dtype = tuple(p.shape), p.dtype
                s.manifold = getattr(p, "manifold", None)
                self._check_tensor(s, p, "parameter")
                try:
                    s.rows, s.cols, s.transposed = (s.manifold.layout(s.shape) if s.manifold is not None
                                                    else euclidean_layout(s.shape))
                except ValueError as e:
                    raise ValueError(f"{s.label()}: {e}") from None
                s.matrices = 1
                if group.get("batched") and s.manifold is None and len(s.shape) >= 3:
                    # [..., M, N]: a row-major (prod(...) M) x N array holding its M x N matrices one after another.
                    s.matrices = max(1, math.prod(s.shape[:-2]))
                    s.rows, s.cols = math.prod(s.shape[:-1]), s.shape[-1]
                specs.append(s)
        return specs

    @staticmethod
    def _check_tensor(s, t, what):
        if t.is_sparse:
            raise TypeError(f"{s.label()}: the {what} is a sparse tensor; geomopt steps dense CPU tensors")
        if t.device.type != "cpu":
            raise TypeError(f"{s.label()}: the {what} is on {t.device}; geomopt steps CPU tensors")
        if t.dtype not in _DTYPES:
            raise TypeError(f"{s.label()}: the {what} is {t.dtype}; geomopt steps torch.float32 or torch.float64")
        if not t.is_contiguous():
            raise ValueError(f"{s.label()}: the {what} is not contiguous; call .contiguous() on it first")

    def _build(self, groups):
        """Engines for these groups: one per dtype and set of kernel options, each over its parameters."""
        specs = self._specs_of(groups)
        params = [s.param.data_ptr() for s in specs]
        lr, weight_decay = self._checked_rates(groups)
        by_key = {}
        for k, s in enumerate(specs):
            options = self._kernel_options(groups[s.group])
            key = (s.dtype, tuple(sorted(options.items())))
            spec = _core.ParamSpec()
            spec.kind = s.manifold.kind if s.manifold is not None else 0
            spec.rows, spec.cols, spec.transposed = s.rows, s.cols, s.transposed
            spec.group, spec.index = s.group, k
            spec.retraction = groups[s.group].get("retraction") or ""
            spec.muon = self._leaf_choice(groups[s.group])
            spec.matrices = s.matrices
            by_key.setdefault(key, (options, []))[1].append(spec)
        if len(by_key) > 1 and (self._common["clip_norm"] > 0 or self._common["non_finite"] != "propagate"):
            raise ValueError("clip_norm and non_finite act on all parameters at once: every group must then share "
                             "the optimizer's options other than lr and weight_decay, and one dtype")
        engines, owner = [], {}
        for (dtype, _), (options, leaf_specs) in by_key.items():
            c = self._common
            try:
                engine = _core.make_engine(self._kernel, dtype == torch.float64, options, c["clip_norm"],
                                           c["ema_decay"], c["non_finite"], c["threads"], c["section"], leaf_specs,
                                           params, lr, weight_decay)
            except ValueError as e:
                raise ValueError(_name_parameter(str(e), specs)) from None
            for leaf in range(len(engine)):
                owner[engine.index(leaf)] = (engine, leaf)
            engines.append(engine)
        # A manifold parameter must be on its manifold, to within the tolerance every binding uses.
        for k, s in enumerate(specs):
            if s.manifold is None:
                continue
            engine, leaf = owner[k]
            tolerance = _core.tensor_point_tolerance(s.dtype == torch.float64, s.rows, s.cols)
            distance = engine.distance(leaf)
            if not (distance <= tolerance):
                raise ValueError(f"{s.label()}: not a point of {s.manifold.name} (its distance from the manifold is "
                                 f"{distance:.3g}, the tolerance {tolerance:.3g}); geomopt.manifolds.project puts a "
                                 f"tensor there")
        views = [self._views_of(s, *owner[k]) for k, s in enumerate(specs)]
        return engines, specs, views

    @staticmethod
    def _views_of(s, engine, leaf):
        """The state tensors of one parameter, views of the engine's memory: step, the kernel's arrays, ema."""
        state = {"step": torch.from_numpy(engine.steps())[leaf]}
        for k, name in enumerate(engine.slot_names(leaf)):
            state[name] = _shaped(s, torch.from_numpy(engine.slot(leaf, k)))
        section = engine.section(leaf)
        if section is not None:
            state["section"] = torch.from_numpy(section)
        ema = engine.ema(leaf)
        if ema is not None:
            state["ema"] = _shaped(s, torch.from_numpy(ema))
        return state

    def _install_views(self):
        self.state = collections.defaultdict(dict)
        for s, view in zip(self._specs, self._views):
            self.state[s.param] = view

    def _carry_state(self, engines, specs, views):
        """Copies the state of the parameters the current engines have into new views (add_param_group)."""
        old = {id(s.param): v for s, v in zip(self._specs, self._views)}
        steps = {}
        for s, v in zip(specs, views):
            if id(s.param) in old:
                ov = old[id(s.param)]
                for name, t in v.items():
                    if name != "step" and name in ov:
                        t.copy_(ov[name])
                steps[id(s.param)] = int(ov["step"])
        _set_steps(engines, specs, steps)

    # -- stepping -----------------------------------------------------------------------------------------------------

    @torch.no_grad()
    def step(self, closure=None):
        """One step of every parameter that has a gradient. Returns the closure's loss, if a closure is given."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        params, grads = [], []
        strided = torch.strided
        for s in self._specs:
            # The checks in their cheapest form (a tenth of the step's Python time); _refuse says what is wrong.
            p = s.param
            if not (p.layout is strided and p.is_cpu and p.dtype is s.dtype and p.is_contiguous() and
                    p.shape == s.shape):
                self._refuse(s, p, None)
            params.append(p.data_ptr())
            g = p.grad
            if g is None:
                grads.append(0)
            elif g.layout is strided and g.is_cpu and g.dtype is s.dtype and g.is_contiguous() and g.shape == s.shape:
                grads.append(g.data_ptr())
            else:
                self._refuse(s, p, g)
        lr, weight_decay = self._checked_rates(self.param_groups)
        try:
            reports = _core.step(self._engines, params, grads, lr, weight_decay)
        except ValueError as e:
            raise ValueError(_name_parameter(str(e), self._specs)) from None
        except RuntimeError as e:
            raise RuntimeError(_name_parameter(str(e), self._specs)) from None
        self.last_report = self._report(reports)
        return loss

    def _rates(self, groups):
        """The groups' rates as the engines read them: lr and weight_decay, one entry per group."""
        return [float(g["lr"]) for g in groups], [float(g.get("weight_decay", 0.0)) for g in groups]

    def _checked_rates(self, groups):
        lr, weight_decay = self._rates(groups)
        per_group = len(lr) // max(1, len(groups))
        for k, (rate, decay) in enumerate(zip(lr, weight_decay)):
            if not (rate >= 0) or not (decay >= 0):
                raise ValueError(f"group {k // per_group}: {self._rate_names[k % per_group]} must be >= 0, got "
                                 f"{rate} and {decay}")
        return lr, weight_decay

    _rate_names = ("lr and weight_decay",)

    def _leaf_choice(self, group):
        """ParamSpec.muon of the group's parameters: whether Muon steps them (-1: Muon's own rule)."""
        return -1

    def _refuse(self, s, p, g):
        """Raises the error that the parameter p (g None) or its gradient g deserves."""
        if g is None:
            if tuple(p.shape) != s.shape or p.dtype != s.dtype:
                raise ValueError(f"{s.label()}: the parameter is {p.dtype} {tuple(p.shape)}, it was {s.dtype} "
                                 f"{s.shape} when the optimizer was made; make a new optimizer for a new shape")
            self._check_tensor(s, p, "parameter")
        else:
            self._check_tensor(s, g, "gradient")
            if g.dtype != s.dtype:
                raise TypeError(f"{s.label()}: the gradient is {g.dtype}, the parameter {s.dtype}")
            if tuple(g.shape) != s.shape:
                raise ValueError(f"{s.label()}: the gradient has shape {tuple(g.shape)}, the parameter {s.shape}")
        raise AssertionError(f"{s.label()}: refused for no reason found")  # the two checks disagree: a bug here

    def _report(self, reports):
        applied = all(r.applied for r in reports)
        norms = [r.grad_norm for r in reports]
        where, why = None, None
        for engine, r in zip(self._engines, reports):
            if r.non_finite_leaf >= 0 and where is None:
                where, why = self._specs[engine.index(r.non_finite_leaf)].label(), r.non_finite_reason
        return StepReport(applied, norms[0] if len(norms) == 1 else float("nan"),
                          reports[0].clip_scale if len(reports) == 1 else 1.0, where, why)

    # -- state --------------------------------------------------------------------------------------------------------

    def state_dict(self):
        """torch's layout: {'state': {index: {'step': ..., 'exp_avg': ..., ...}}, 'param_groups': [...]}; the
        tensors are views of the live state, as torch.optim's are."""
        return super().state_dict()

    def load_state_dict(self, state_dict):
        """Loads torch's layout (as state_dict() gives it) into fresh engines; on any error nothing changes."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        for g, (saved, mine) in enumerate(zip(groups, self.param_groups)):
            if len(saved["params"]) != len(mine["params"]):
                raise ValueError(f"loaded state dict contains a parameter group ({g}) that doesn't match the size of "
                                 f"optimizer's group")
        new_groups = []
        for saved, mine in zip(groups, self.param_groups):
            group = {k: v for k, v in saved.items() if k != "params"}
            group["params"] = mine["params"]
            new_groups.append(group)
        saved_state = state_dict["state"]
        ids = [i for g in groups for i in g["params"]]
        engines, specs, views = self._build(new_groups)
        steps, loads = {}, []
        for k, (s, view) in enumerate(zip(specs, views)):
            entry = saved_state.get(ids[k])
            if entry is None:
                steps[id(s.param)] = 0
                continue
            arrays = 0
            for name, t in view.items():
                if name == "step" or (name == "ema" and name not in entry):
                    continue  # an average absent from the file starts from the parameters
                if name not in entry:
                    raise ValueError(f"{s.label()}: the loaded state has no '{name}' (it has {sorted(entry)})")
                if entry[name] is None:
                    continue  # torch's SGD before its first step: a fresh buffer
                value = torch.as_tensor(entry[name])
                if value.shape != t.shape:
                    raise ValueError(f"{s.label()}: the loaded '{name}' has shape {tuple(value.shape)}, expected "
                                     f"{tuple(t.shape)}")
                if not value.dtype.is_floating_point:
                    raise TypeError(f"{s.label()}: the loaded '{name}' is {value.dtype}, a floating-point tensor is "
                                    f"expected")
                loads.append((t, value))
                arrays += name != "ema"
            # torch's SGD keeps no step count: a loaded momentum buffer means it has stepped.
            step = entry.get("step", 1 if arrays else 0)
            step = float(step.item() if isinstance(step, torch.Tensor) else step)
            if not (step >= 0 and step == int(step)):
                raise ValueError(f"{s.label()}: the loaded step is {step}; a whole number >= 0 is expected")
            steps[id(s.param)] = int(step)
        # Everything checked: copy in, then take the new engines.
        for t, value in loads:
            t.copy_(value)
        _set_steps(engines, specs, steps)
        self.param_groups[:] = new_groups
        self._engines, self._specs, self._views = engines, specs, views
        self._install_views()

    def averaged_parameters(self):
        """The moving average of each parameter (ema_decay > 0), a tensor in the parameter's shape, in the order of
        the optimizer's parameters; a manifold parameter's is the raw average of its points, off the manifold."""
        if self._common["ema_decay"] == 0:
            raise RuntimeError("averaged_parameters: the optimizer was made without ema_decay")
        return [v["ema"].clone() for v in self._views]

    def state_bytes(self):
        """Bytes of optimizer state held in C++ (the kernel's arrays, sections, the moving average)."""
        return sum(e.nbytes() for e in self._engines)


StepReport = collections.namedtuple("StepReport", "applied grad_norm clip_scale non_finite_parameter non_finite_reason")
StepReport.__doc__ = """What a step did: applied (False when non_finite='skip' refused it), the global gradient norm when
clipping or the finiteness check computed it (NaN otherwise), the clip factor, and for a refused step the parameter
and the reason."""


def _shaped(s, t):
    """A state array of the parameter s in the parameter's shape when it has one number per entry (moments of a
    Euclidean parameter, a Muon momentum, the moving average), else as it is (a manifold parameter's tangent
    coordinates). The engine's numbers are the leaf's: a tall Stiefel or Grassmann tensor's are column-major."""
    if t.numel() != math.prod(s.shape):
        return t
    return t.view(s.shape[1], s.shape[0]).t() if s.transposed else t.view(s.shape)


def _name_parameter(message, specs):
    """The C++ side names a parameter '#<index>' (its position among the optimizer's parameters); name it as the
    optimizer's own messages do."""
    m = re.match(r"^#(\d+): (.*)$", message, re.S)
    if m is None:
        return message
    k = int(m.group(1))
    return f"{specs[k].label()}: {m.group(2)}" if k < len(specs) else message


def _set_steps(engines, specs, steps):
    """Each engine's per-parameter step counts from steps (by id of the parameter; absent: 0)."""
    for engine in engines:
        engine.set_step_counts([steps.get(id(specs[engine.index(leaf)].param), 0) for leaf in range(len(engine))])


def _require(ok, what, value):
    if not ok:
        raise ValueError(f"Invalid {what} value: {value}")


class SGD(_GeomoptOptimizer):
    """torch.optim.SGD (momentum, dampening, Nesterov, L2 weight decay), each parameter in its own geometry."""

    _kernel = "SGD"

    def __init__(self, params, lr=_required, momentum=0, dampening=0, weight_decay=0,
                 nesterov=False, *, maximize=False, foreach=None, differentiable=False, **common):
        if lr is _required:
            raise ValueError("SGD: lr is required, as in torch.optim.SGD")
        _require(lr >= 0, "learning rate", lr)
        _require(momentum >= 0, "momentum", momentum)
        _require(weight_decay >= 0, "weight_decay", weight_decay)
        _no_maximize(maximize, differentiable)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov,
                        maximize=False, foreach=foreach, differentiable=False)
        super().__init__(params, defaults, **common)

    def _kernel_options(self, g):
        return {"momentum": float(g["momentum"]), "dampening": float(g["dampening"]),
                "nesterov": float(bool(g["nesterov"]))}


class _AdamBase(_GeomoptOptimizer):
    def __init__(self, params, lr, betas, eps, weight_decay, amsgrad, maximize, differentiable, extra, common):
        _require(lr >= 0, "learning rate", lr)
        _require(eps >= 0, "epsilon", eps)
        _require(0 <= betas[0] < 1, "beta parameter at index 0", betas[0])
        _require(0 <= betas[1] < 1, "beta parameter at index 1", betas[1])
        _require(weight_decay >= 0, "weight_decay", weight_decay)
        _no_maximize(maximize, differentiable)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad, maximize=False,
                        **extra)
        super().__init__(params, defaults, **common)

    def _kernel_options(self, g):
        return {"beta1": float(g["betas"][0]), "beta2": float(g["betas"][1]), "eps": float(g["eps"]),
                "amsgrad": float(bool(g["amsgrad"]))}


class Adam(_AdamBase):
    """torch.optim.Adam (L2 weight decay, AMSGrad), each parameter in its own geometry."""

    _kernel = "Adam"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, *,
                 foreach=None, maximize=False, capturable=False, differentiable=False, fused=False, **common):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize, differentiable,
                         dict(foreach=foreach, capturable=capturable, differentiable=False, fused=fused), common)


class AdamW(_AdamBase):
    """torch.optim.AdamW (decoupled weight decay, AMSGrad), each parameter in its own geometry."""

    _kernel = "AdamW"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *,
                 maximize=False, foreach=None, capturable=False, **common):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize, False,
                         dict(foreach=foreach, capturable=capturable), common)


class RMSprop(_GeomoptOptimizer):
    """torch.optim.RMSprop (momentum, centered, L2 weight decay), each parameter in its own geometry."""

    _kernel = "RMSprop"

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False, *,
                 foreach=None, maximize=False, differentiable=False, **common):
        _require(lr >= 0, "learning rate", lr)
        _require(eps >= 0, "epsilon", eps)
        _require(momentum >= 0, "momentum", momentum)
        _require(weight_decay >= 0, "weight_decay", weight_decay)
        _require(0 <= alpha <= 1, "alpha", alpha)
        _no_maximize(maximize, differentiable)
        defaults = dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered, weight_decay=weight_decay,
                        foreach=foreach, maximize=False, differentiable=False)
        super().__init__(params, defaults, **common)

    def _kernel_options(self, g):
        return {"alpha": float(g["alpha"]), "eps": float(g["eps"]), "momentum": float(g["momentum"]),
                "centered": float(bool(g["centered"]))}


class Adagrad(_GeomoptOptimizer):
    """torch.optim.Adagrad (learning-rate decay, initial accumulator, L2 weight decay), each parameter in its own
    geometry."""

    _kernel = "Adagrad"

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10,
                 foreach=None, *, maximize=False, **common):
        _require(lr >= 0, "learning rate", lr)
        _require(lr_decay >= 0, "lr_decay", lr_decay)
        _require(weight_decay >= 0, "weight_decay", weight_decay)
        _require(initial_accumulator_value >= 0, "initial_accumulator_value", initial_accumulator_value)
        _require(eps >= 0, "epsilon", eps)
        _no_maximize(maximize, False)
        defaults = dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, foreach=foreach, maximize=False)
        super().__init__(params, defaults, **common)

    def _kernel_options(self, g):
        return {"lr_decay": float(g["lr_decay"]), "eps": float(g["eps"]),
                "initial_accumulator_value": float(g["initial_accumulator_value"])}


def _no_maximize(maximize, differentiable):
    if maximize:
        raise ValueError("maximize=True is not supported by geomopt; negate the loss instead")
    if differentiable:
        raise ValueError("differentiable=True is not supported by geomopt: its step runs outside autograd")


_ADJUST_LR = {None: 0, "original": 0, "match_rms_adamw": 1}
_STIEFEL_METHODS = ("fixed_point", "dual_ascent")
_STIEFEL_RETRACTIONS = ("polar", "cayley", "geodesic")


class _MuonBase(_GeomoptOptimizer):
    """Muon's leaves (matrices; ManifoldMuon's manifold parameters too) and AdamW's (the rest) in one step. A group's
    ``lr`` and ``weight_decay`` are Muon's, its ``adamw_lr`` and ``adamw_weight_decay`` AdamW's; ``use_muon`` (None,
    True or False) picks its leaves. A Euclidean parameter of three or more dimensions is, by default, a matrix of its
    first dimension by the others (a convolution kernel [out, in, kh, kw] as out x (in kh kw), the reshape of Keller
    Jordan's Muon); with the group's ``batched`` True, a [..., M, N] parameter is a batch of M x N matrices (per head,
    per expert), each orthogonalized and scaled by its own shape, as batched Newton-Schulz over the leading dimensions
    does."""

    def __init__(self, params, lr, weight_decay, momentum, nesterov, ns_coefficients, eps, ns_steps, adjust_lr_fn,
                 adamw_lr, adamw_betas, adamw_eps, adamw_weight_decay, extra, common):
        _require(lr >= 0, "learning rate", lr)
        _require(weight_decay >= 0, "weight_decay", weight_decay)
        _require(0 <= momentum < 1, "momentum", momentum)
        _require(isinstance(ns_steps, int) and 1 <= ns_steps <= 100, "ns_steps", ns_steps)
        _require(len(ns_coefficients) == 3, "ns_coefficients", ns_coefficients)
        _require(eps > 0, "epsilon", eps)
        _require(adjust_lr_fn in _ADJUST_LR, "adjust_lr_fn (None, 'original' or 'match_rms_adamw')", adjust_lr_fn)
        _require(adamw_lr >= 0, "adamw_lr", adamw_lr)
        _require(0 <= adamw_betas[0] < 1, "adamw_betas[0]", adamw_betas[0])
        _require(0 <= adamw_betas[1] < 1, "adamw_betas[1]", adamw_betas[1])
        _require(adamw_eps >= 0, "adamw_eps", adamw_eps)
        _require(adamw_weight_decay >= 0, "adamw_weight_decay", adamw_weight_decay)
        _require(isinstance(extra.get("batched"), bool), "batched (True or False)", extra.get("batched"))
        defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov,
                        ns_coefficients=tuple(ns_coefficients), eps=eps, ns_steps=ns_steps, adjust_lr_fn=adjust_lr_fn,
                        adamw_lr=adamw_lr, adamw_betas=tuple(adamw_betas), adamw_eps=adamw_eps,
                        adamw_weight_decay=adamw_weight_decay, use_muon=None, **extra)
        super().__init__(params, defaults, **common)

    _rate_names = ("lr and weight_decay", "adamw_lr and adamw_weight_decay")

    def _rates(self, groups):
        lr, weight_decay = [], []
        for g in groups:
            lr += [float(g["lr"]), float(g["adamw_lr"])]
            weight_decay += [float(g["weight_decay"]), float(g["adamw_weight_decay"])]
        return lr, weight_decay

    def _leaf_choice(self, group):
        use = group.get("use_muon")
        return -1 if use is None else int(bool(use))

    def _kernel_options(self, g):
        a, b, c = (float(x) for x in g["ns_coefficients"])
        return {"momentum": float(g["momentum"]), "nesterov": float(bool(g["nesterov"])),
                "ns_steps": float(g["ns_steps"]), "ns_a": a, "ns_b": b, "ns_c": c, "ns_eps": float(g["eps"]),
                "scale": float(_ADJUST_LR[g["adjust_lr_fn"]]), "adamw_beta1": float(g["adamw_betas"][0]),
                "adamw_beta2": float(g["adamw_betas"][1]), "adamw_eps": float(g["adamw_eps"])}


class Muon(_MuonBase):
    """Muon, with torch.optim.Muon's arguments: each Euclidean parameter of two or more dimensions (a matrix of its
    first dimension by the others, at least 2 x 2; with ``batched``, its [..., M, N] matrices one by one) steps by its
    momentum orthogonalized by Newton-Schulz, ``P <- (1 - lr weight_decay) P - lr scale msign(U)``; every other
    parameter (vectors, manifold parameters) by AdamW in its own geometry, with the ``adamw_*`` options, in the same
    step."""

    _kernel = "Muon"

    def __init__(self, params, lr=1e-3, weight_decay=0.1, momentum=0.95, nesterov=True,
                 ns_coefficients=(3.4445, -4.775, 2.0315), eps=1e-7, ns_steps=5, adjust_lr_fn=None, *,
                 adamw_lr=1e-3, adamw_betas=(0.9, 0.999), adamw_eps=1e-8, adamw_weight_decay=1e-2, batched=False,
                 **common):
        super().__init__(params, lr, weight_decay, momentum, nesterov, ns_coefficients, eps, ns_steps, adjust_lr_fn,
                         adamw_lr, adamw_betas, adamw_eps, adamw_weight_decay, dict(batched=batched), common)


class ManifoldMuon(_MuonBase):
    """Manifold Muon: Muon's step for Euclidean matrices, and for each Stiefel, Sphere, SpecialOrthogonal, Grassmann
    or Oblique parameter the spectral-norm steepest descent within its tangent space of its momentum (the same
    momentum, Nesterov blend and ``lr``); every other parameter by AdamW, as in Muon (``use_muon=False`` sends a
    group's manifold parameters to AdamW too). A Stiefel parameter returns to its manifold by ``stiefel_retraction``
    ('polar', 'cayley' or 'geodesic'); each step makes ``stiefel_max_iterations`` updates of the direction's
    multiplier, started from the one the parameter's previous step left (``stiefel_warm_start``; the state's
    "multiplier"); ``stiefel_warm_start=False`` with a large ``stiefel_max_iterations`` solves each step to
    ``stiefel_tolerance`` from scratch. The other four return by their manifold's retraction (``retraction``, else
    its default). Their directions are closed forms, except Oblique's: a Newton iteration on a multiplier per unit row
    (the state's "multiplier"), started from the previous step's, of at most ``oblique_max_iterations``
    steps, stopping at the relative duality gap ``oblique_tolerance``."""

    _kernel = "ManifoldMuon"

    def __init__(self, params, lr=1e-3, weight_decay=0.1, momentum=0.95, nesterov=True,
                 ns_coefficients=(3.4445, -4.775, 2.0315), eps=1e-7, ns_steps=5, adjust_lr_fn=None, *,
                 adamw_lr=1e-3, adamw_betas=(0.9, 0.999), adamw_eps=1e-8, adamw_weight_decay=1e-2,
                 stiefel_retraction="polar", stiefel_method="fixed_point", stiefel_tolerance=1e-6,
                 stiefel_max_iterations=1, stiefel_warm_start=True, oblique_tolerance=1e-6,
                 oblique_max_iterations=5, batched=False, **common):
        _require(stiefel_retraction in _STIEFEL_RETRACTIONS, "stiefel_retraction", stiefel_retraction)
        _require(stiefel_method in _STIEFEL_METHODS, "stiefel_method", stiefel_method)
        _require(stiefel_tolerance > 0, "stiefel_tolerance", stiefel_tolerance)
        _require(isinstance(stiefel_max_iterations, int) and stiefel_max_iterations >= 1, "stiefel_max_iterations",
                 stiefel_max_iterations)
        _require(isinstance(stiefel_warm_start, bool), "stiefel_warm_start", stiefel_warm_start)
        _require(oblique_tolerance > 0, "oblique_tolerance", oblique_tolerance)
        _require(isinstance(oblique_max_iterations, int) and 0 <= oblique_max_iterations <= 100000,
                 "oblique_max_iterations", oblique_max_iterations)
        extra = dict(stiefel_retraction=stiefel_retraction, stiefel_method=stiefel_method,
                     stiefel_tolerance=stiefel_tolerance, stiefel_max_iterations=stiefel_max_iterations,
                     stiefel_warm_start=stiefel_warm_start, oblique_tolerance=oblique_tolerance,
                     oblique_max_iterations=oblique_max_iterations, batched=batched)
        super().__init__(params, lr, weight_decay, momentum, nesterov, ns_coefficients, eps, ns_steps, adjust_lr_fn,
                         adamw_lr, adamw_betas, adamw_eps, adamw_weight_decay, extra, common)

    def _kernel_options(self, g):
        o = super()._kernel_options(g)
        o.update(stiefel_retraction=float(_STIEFEL_RETRACTIONS.index(g["stiefel_retraction"])),
                 stiefel_method=float(_STIEFEL_METHODS.index(g["stiefel_method"])),
                 stiefel_tolerance=float(g["stiefel_tolerance"]),
                 stiefel_max_iterations=float(g["stiefel_max_iterations"]),
                 stiefel_warm_start=float(g["stiefel_warm_start"]),
                 oblique_tolerance=float(g["oblique_tolerance"]),
                 oblique_max_iterations=float(g["oblique_max_iterations"]))
        return o
