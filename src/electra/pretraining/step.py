"""A whole pre-training step as one function: every micro-batch's forward and backward (the
generator, its samples and the discriminator included), gradient clipping and AdamW, with the
non-finite guard applied on the device. Nothing in it asks the host, so `torch.compile` takes
it as one graph (`fullgraph=True`) and, on CUDA, replays it as a CUDA graph
(`mode="reduce-overhead"`): one launch instead of thousands per step (docs/speed.md).

The update is AdamW written out (torch.optim.AdamW's single-tensor algorithm; decoupled weight
decay, bias correction) over the optimizer's own state tensors, so checkpoints, resume and the
eager loop read the same state. A step whose loss or gradient norm is not finite leaves every
parameter and moment unchanged and does not count as an Adam step; the caller reads the
returned flag when it logs (`StepLoop.count_update`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from electra.device import backend_of
from electra.model.encoder import known_padding, mask_has_padding
from electra.precision import autocast

# What one micro-batch reports to the log window (the loop's `_window_values`).
WindowValues = Callable[[object, torch.Tensor], dict[str, torch.Tensor]]


def gradient_norm(grads: list[torch.Tensor]) -> torch.Tensor:
    """The global L2 norm of `grads`, in fp32 (torch.nn.utils.clip_grad_norm_'s norm)."""
    return torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(g.float()) for g in grads]))


def clip_coefficient(norm: torch.Tensor, max_norm: float | None) -> torch.Tensor:
    """The factor clip_grad_norm_ multiplies the gradients by: max_norm / (norm + 1e-6),
    at most 1."""
    if not max_norm:
        return torch.ones((), device=norm.device)
    return (max_norm / (norm + 1e-6)).clamp(max=1.0)


@torch.no_grad()
def ensure_adamw_state(optimizer: torch.optim.Optimizer) -> None:
    """Create AdamW's state (step, exp_avg, exp_avg_sq) where the optimizer has none yet, as
    torch creates it at its first step, with `step` on the parameter's device so that the
    update never reads a host scalar."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            state = optimizer.state[p]
            if not state:
                state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            elif state["step"].device != p.device:
                state["step"] = state["step"].to(p.device)


@dataclass
class AdamWGroup:
    """One param group's AdamW hyper-parameters and state tensors, read off the optimizer once.
    The compiled step reads these plain lists, never the optimizer: dynamo guards on every
    value of an optimizer's param groups it sees, the learning rate included, so a step that
    read `optimizer.param_groups` recompiled at every new learning rate."""

    beta1: float
    beta2: float
    eps: float
    weight_decay: float
    params: list[nn.Parameter]
    steps: list[torch.Tensor]
    exp_avgs: list[torch.Tensor]
    exp_avg_sqs: list[torch.Tensor]


def adamw_groups(optimizer: torch.optim.Optimizer) -> list[AdamWGroup]:
    """`optimizer`'s groups as `AdamWGroup`s over its own state tensors (created where missing,
    `ensure_adamw_state`), so updates through them are the optimizer's: checkpoints and the
    eager loop read the same state. Read again after the optimizer's state is replaced
    (`load_state_dict`)."""
    ensure_adamw_state(optimizer)
    groups = []
    for group in optimizer.param_groups:
        params = list(group["params"])
        states = [optimizer.state[p] for p in params]
        beta1, beta2 = group["betas"]
        groups.append(AdamWGroup(float(beta1), float(beta2), float(group["eps"]),
                                 float(group["weight_decay"]), params,
                                 [s["step"] for s in states], [s["exp_avg"] for s in states],
                                 [s["exp_avg_sq"] for s in states]))
    return groups


@torch.no_grad()
def guarded_adamw(optimizer: torch.optim.Optimizer | list[AdamWGroup],
                  grads: dict[nn.Parameter, torch.Tensor], lrs: torch.Tensor,
                  finite: torch.Tensor) -> None:
    """One AdamW update of every parameter in `grads` with group i's learning rate `lrs[i]`,
    applied only where `finite` (a 0-dim bool tensor) is True: otherwise parameters, moments
    and step counts stay exactly as they were. Parameters without a gradient are not touched,
    as torch's AdamW leaves them."""
    groups = adamw_groups(optimizer) if isinstance(optimizer, torch.optim.Optimizer) else optimizer
    apply = finite.float()
    for i, group in enumerate(groups):
        beta1, beta2, eps, decay, lr = (group.beta1, group.beta2, group.eps, group.weight_decay,
                                        lrs[i])
        for p, step_t, avg_t, avg_sq_t in zip(group.params, group.steps, group.exp_avgs,
                                              group.exp_avg_sqs, strict=True):
            if p not in grads:
                continue
            g = torch.where(finite, grads[p].to(p.dtype), 0.0)
            step = step_t + apply
            exp_avg = avg_t + apply * (1 - beta1) * (g - avg_t)
            exp_avg_sq = avg_sq_t + apply * (1 - beta2) * (g * g - avg_sq_t)
            # An update that is not applied may be the first: count at least 1 in the bias
            # correction so that nothing divides by zero.
            counted = step.clamp(min=1.0)
            bias1 = 1 - beta1 ** counted
            bias2 = 1 - beta2 ** counted
            denom = exp_avg_sq.sqrt() / bias2.sqrt() + eps
            p.sub_(apply * lr * (decay * p + exp_avg / (bias1 * denom)))
            step_t.copy_(step)
            avg_t.copy_(exp_avg)
            avg_sq_t.copy_(exp_avg_sq)


@dataclass
class StepResult:
    loss: torch.Tensor  # the step's loss summed over its micro-batches
    values: list[dict[str, torch.Tensor]]  # per micro-batch, for the log window
    finite: torch.Tensor  # 0-dim bool: the update was applied


class WholeStep:
    """`step(micro_batches) -> StepResult`: a full optimizer step of `objective` on device
    batches. `compile=True` compiles it as one graph (on CUDA replayed as a CUDA graph);
    `compile=False` runs the same code eagerly (what the tests compare it with).

    The learning rates come from the optimizer's param groups (the host's schedule) as a
    device tensor argument, filled before each call without a sync, so a new learning rate is
    new data, not a new graph: a run compiles once (tests/test_whole_step.py). The optimizer's
    state must be loaded (resume) before this is built: the step holds its tensors."""

    def __init__(self, objective: nn.Module, optimizer: torch.optim.Optimizer,
                 max_grad_norm: float | None, precision: str, window_values: WindowValues,
                 compile: bool = False, device: torch.device | None = None) -> None:
        self.objective = objective
        self.optimizer = optimizer
        self.max_grad_norm = max_grad_norm
        self.precision = precision  # fp32 or bf16 (fp16's loss scaling is the eager loop's)
        self.window_values = window_values
        self.params = [p for g in optimizer.param_groups for p in g["params"]
                       if p.requires_grad]
        self.device = device or self.params[0].device
        self.groups = adamw_groups(optimizer)
        self.lrs = torch.zeros(len(optimizer.param_groups), device=self.device)
        self._run = self._step
        self._graphed = compile and backend_of(self.device).graphs
        if compile:
            self._run = compile_whole_step(self._step, self.device)
        if self._graphed:
            # The optimizer's state and the learning rates are updated in place at fixed
            # addresses, so the CUDA graph reads and writes them where they lie (no copies).
            for state in optimizer.state.values():
                for t in state.values():
                    torch._dynamo.mark_static_address(t)
            torch._dynamo.mark_static_address(self.lrs)

    def __call__(self, micro_batches: list[dict[str, torch.Tensor]],
                 padded: bool | None = None) -> StepResult:
        """`padded`: whether any micro-batch has padding, decided on the host batches (see
        `known_padding`); None asks the masks."""
        for i, group in enumerate(self.optimizer.param_groups):
            self.lrs[i].fill_(group["lr"])
        if padded is None:
            padded = any(mask_has_padding(b["attention_mask"]) for b in micro_batches)
        if self._graphed:  # each call is a new step: the last one's outputs are consumed
            torch.compiler.cudagraph_mark_step_begin()
        with known_padding(padded):
            return self._run(micro_batches, self.lrs)

    def _step(self, micro_batches: list[dict[str, torch.Tensor]], lrs: torch.Tensor
              ) -> StepResult:
        n = len(micro_batches)
        grads: dict[nn.Parameter, torch.Tensor] = {}
        total = torch.zeros((), device=self.device)
        values = []
        for batch in micro_batches:
            with autocast(self.device, self.precision):
                output = self.objective(batch)
            micro_grads = torch.autograd.grad(output.loss / n, self.params, allow_unused=True)
            for p, g in zip(self.params, micro_grads, strict=True):
                if g is not None:
                    grads[p] = grads[p] + g if p in grads else g
            total = total + output.loss.detach().float()
            values.append(self.window_values(output, batch["attention_mask"]))
        norm = gradient_norm(list(grads.values()))
        finite = torch.isfinite(norm) & torch.isfinite(total)
        coef = clip_coefficient(norm, self.max_grad_norm)
        grads = {p: g * coef.to(g.dtype) for p, g in grads.items()}
        guarded_adamw(self.groups, grads, lrs, finite)
        return StepResult(total, values, finite)


def compile_whole_step(fn: Callable, device: torch.device) -> Callable:
    """`fn` compiled as one graph: backward included (dynamo's `trace_autograd_ops`), on CUDA
    as a CUDA graph. Raises ElectraError where this torch cannot trace a backward pass."""
    import torch._dynamo  # only when compiling: importing dynamo takes a while

    from electra.errors import ElectraError
    from electra.model.encoder import raise_recompile_limit

    config = torch._dynamo.config
    if not hasattr(config, "trace_autograd_ops"):
        raise ElectraError(f"train.compile_step needs torch >= 2.11 (its compiler traces the "
                           f"backward pass); this is torch {torch.__version__}: use "
                           "train.compile (layers only) instead")
    config.trace_autograd_ops = True
    raise_recompile_limit()
    mode = "reduce-overhead" if backend_of(device).graphs else None
    # dynamic=False: every shape is static by design; a batch of another shape is a graph of
    # its own, never a symbolic one (the step's random draws need concrete sizes).
    return torch.compile(fn, fullgraph=True, dynamic=False, mode=mode)


@contextlib.contextmanager
def deterministic_compiled_random() -> contextlib.AbstractContextManager:
    """Within this block, compiled code draws random numbers as eager code does (inductor's
    `fallback_random`): for comparing a compiled step with the eager one."""
    import torch._inductor.config as inductor_config

    previous = inductor_config.fallback_random
    inductor_config.fallback_random = True
    try:
        yield
    finally:
        inductor_config.fallback_random = previous
