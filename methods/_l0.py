"""Hard-concrete masks (Louizos et al. 2018, arXiv 1712.01312) as CoFi uses them, and the
Lagrangian that steers their expected sparsity to a target (Xia et al. 2022, arXiv 2204.00408).

The maths are pure functions of log α tensors; the two modules at the end only hold parameters.
Constants and the deterministic rule follow CoFi's official `models/l0_module.py`:

- Sampling: u ~ U(ε, 1 − ε), s = sigmoid((log u − log(1 − u) + log α) / β), stretched to
  (l, r) = (−0.1, 1.1) and clamped to [0, 1]. The stretch puts probability mass on exact 0 and
  1, so a mask is truly off or on and still has a gradient in between.
- Keep probability P(z > 0) = 1 − Q(0), Q the CDF of the stretched variable:
  Q(0) = sigmoid(β·log(−l / r) − log α), clamped to [ε, 1 − ε].
- Deterministic mask (evaluation, export): per mask group, the expected number of zeros
  (group size − Σ keep probabilities, rounded half to even like Python's `round`) of the
  lowest-scoring units are 0, the rest 1. The official code keeps the survivors at a soft value
  sigmoid(0.8·log α / β) and folds it into the weights; drydock keeps them at exactly 1, since the
  pruned model is fine-tuned afterwards and a binary mask makes the masked model and the export
  the same function. The ranking is the same (the soft value is monotonic in log α).
- Initialisation: the intermediate (FFN dimension) masks start at log α ~ N(log((1 − d) / d),
  0.01) with drop rate d (`droprate_init`, 0.5 → log α ≈ 0, i.e. sigmoid(log α) = 1 − d; the
  stretched keep probability P(z > 0) is then ≈ 0.83). The hidden, head, MHA-layer and FFN-layer
  masks start at log α ~ N(10, 0.01), always on, as in the official code: sampling them at drop
  rate 0.5 would knock out hidden dimensions, heads and whole sub-layers at random from the first
  pruning step and start the expected sparsity far above the target's ramp, which begins at 0.
- log α is clamped to [log 0.01, log 100] after every optimizer step until the surgery, as the
  official trainer does (`constrain_parameters`), warm-up steps included: the pruning phase
  starts from clamped always-on masks, and evaluations and the surgery rank clamped values.
- Binarising at a target (drydock's addition, `binarise_at`): the Lagrangian steers the
  *expected* sparsity, and when pruning ends while the controller still swings around the target
  the deterministic masks can miss it by several points (docs/stack-facts.md, "CoFi's deterministic
  masks can miss the target sparsity"). Shifting every log α by one common offset changes how many units each group drops
  (monotonically) but never the order within a group, so a bisection over the offset finds the
  binary masks whose sparsity is closest to the target while keeping the masks' own ranking: the
  least certain units go first, and a group the training made certain (log α at the clamp)
  moves last.

Expected size (the paper's bookkeeping, embeddings excluded): a parameter survives only if every
mask governing it does. An attention head holds 4·d_head parameters per hidden dimension (its
slices of Q, K, V and the output projection), governed by hidden × head × MHA-layer masks; an
FFN intermediate dimension holds 2 per hidden dimension, governed by hidden × intermediate ×
FFN-layer masks. Sparsity = 1 − expected size / the unpruned encoder's L·(4·H² + 2·H·I).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields

import torch
from torch import nn

LIMIT_LOW, LIMIT_HIGH = -0.1, 1.1
TEMPERATURE = 2.0 / 3.0  # β
EPSILON = 1e-6
LOG_ALPHA_MIN, LOG_ALPHA_MAX = math.log(1e-2), math.log(1e2)
ALWAYS_ON_LOG_ALPHA = 10.0
INIT_NOISE = 1e-2
_LOG_ZERO_POINT = math.log(-LIMIT_LOW / LIMIT_HIGH)  # logit of the unstretched value mapped to 0


@dataclass
class StructureMasks:
    """One value per prunable unit at CoFi's five granularities (samples, probabilities or 0/1)."""

    hidden: torch.Tensor  # [hidden]: shared by the embeddings and every layer
    heads: torch.Tensor  # [layers, heads]
    mha: torch.Tensor  # [layers]: the whole attention sub-layer
    intermediate: torch.Tensor  # [layers, intermediate]
    ffn: torch.Tensor  # [layers]: the whole feed-forward sub-layer

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> StructureMasks:
        return StructureMasks(**{f.name: fn(getattr(self, f.name)) for f in fields(self)})


# ----------------------------------------------------------------------------------------------
# hard concrete
# ----------------------------------------------------------------------------------------------


def sample_hard_concrete(log_alpha: torch.Tensor, temperature: float = TEMPERATURE) -> torch.Tensor:
    """One reparameterised sample per unit, in [0, 1] with point masses at 0 and 1."""
    uniform = EPSILON + (1 - 2 * EPSILON) * torch.rand_like(log_alpha)
    concrete = torch.sigmoid((torch.log(uniform) - torch.log1p(-uniform) + log_alpha) / temperature)
    return (concrete * (LIMIT_HIGH - LIMIT_LOW) + LIMIT_LOW).clamp(0.0, 1.0)


def keep_probability(log_alpha: torch.Tensor, temperature: float = TEMPERATURE) -> torch.Tensor:
    """P(z > 0): differentiable in log α, the basis of the expected model size."""
    return 1 - torch.sigmoid(_LOG_ZERO_POINT * temperature - log_alpha).clamp(EPSILON, 1 - EPSILON)


def deterministic_mask(log_alpha: torch.Tensor, min_kept: int = 0) -> torch.Tensor:
    """0/1 masks for the groups along the last dimension: the expected number of zeros of each
    group, lowest log α first, are zeroed (at most `size − min_kept` of them)."""
    log_alpha = log_alpha.detach()
    size = log_alpha.shape[-1]
    expected_zeros = size - keep_probability(log_alpha).sum(-1)
    num_zeros = torch.round(expected_zeros).clamp(0, size - min_kept)
    rank = log_alpha.argsort(dim=-1, stable=True).argsort(dim=-1)  # 0 = lowest log α of its group
    return (rank >= num_zeros.unsqueeze(-1)).to(log_alpha.dtype)


def init_log_alpha(shape: tuple[int, ...], mean: float) -> torch.Tensor:
    return torch.randn(shape) * INIT_NOISE + mean


def droprate_log_alpha(droprate: float) -> float:
    """log α whose unstretched concrete exceeds 1/2 with probability 1 − droprate."""
    return math.log(1 - droprate) - math.log(droprate)


# ----------------------------------------------------------------------------------------------
# expected size, sparsity, the Lagrangian and its target
# ----------------------------------------------------------------------------------------------


def remaining_parameters(keep: StructureMasks, head_size: int) -> torch.Tensor:
    """Expected surviving encoder parameters (exact for 0/1 masks) with the paper's counts."""
    hidden = keep.hidden.sum()
    heads = (keep.mha.unsqueeze(-1) * keep.heads).sum()
    intermediate = (keep.ffn.unsqueeze(-1) * keep.intermediate).sum()
    return hidden * (4 * head_size * heads + 2 * intermediate)


def prunable_parameters(keep: StructureMasks, head_size: int) -> int:
    """The unpruned encoder's count under the same bookkeeping: L·(4·H² + 2·H·I)."""
    layers, heads = keep.heads.shape
    hidden = keep.hidden.numel()
    intermediate = keep.intermediate.shape[-1]
    return layers * hidden * (4 * head_size * heads + 2 * intermediate)


def expected_sparsity(keep: StructureMasks, head_size: int) -> torch.Tensor:
    return 1 - remaining_parameters(keep, head_size) / prunable_parameters(keep, head_size)


def lagrangian_penalty(
    sparsity: torch.Tensor, target: float, lambda1: torch.Tensor, lambda2: torch.Tensor
) -> torch.Tensor:
    """λ1·(ŝ − t) + λ2·(ŝ − t)²: minimised over the masks, maximised over λ1, λ2."""
    gap = sparsity - target
    return (lambda1 * gap + lambda2 * gap * gap).sum()  # a scalar for scalar or one-element λ


def target_sparsity_at(step: int, warmup_steps: int, final: float) -> float:
    """Linear ramp from 0 to `final` over `warmup_steps` pruning steps, then constant."""
    if warmup_steps <= 0:
        return final
    return final * min(1.0, step / warmup_steps)


# ----------------------------------------------------------------------------------------------
# parameter holders
# ----------------------------------------------------------------------------------------------


def binarise(log_alphas: StructureMasks, offset: float = 0.0) -> StructureMasks:
    """The deterministic 0/1 masks of every group, with all log α shifted by `offset`. At least
    one hidden dimension survives (a zero-width model is not a model); heads, dimensions and
    whole sub-layers may all go."""
    shifted = log_alphas.map(lambda log_alpha: log_alpha.detach() + offset)
    return StructureMasks(
        hidden=deterministic_mask(shifted.hidden, min_kept=1),
        heads=deterministic_mask(shifted.heads),
        mha=deterministic_mask(shifted.mha.unsqueeze(-1)).squeeze(-1),  # one group per layer
        intermediate=deterministic_mask(shifted.intermediate),
        ffn=deterministic_mask(shifted.ffn.unsqueeze(-1)).squeeze(-1),
    )


def binarise_at(
    log_alphas: StructureMasks, head_size: int, target: float, iterations: int = 60
) -> tuple[StructureMasks, float]:
    """The binary masks (and their log α offset) whose sparsity is closest to `target`.

    Sparsity only falls as the offset grows (every group keeps at least as many units), so
    bisection brackets the offset where it crosses the target; of the two sides the closer one
    wins (a whole sub-layer can flip at one offset, so the crossing may be a jump)."""
    def sparsity(offset: float) -> float:
        return float(expected_sparsity(binarise(log_alphas, offset), head_size))

    span = LOG_ALPHA_MAX - LOG_ALPHA_MIN + 30.0  # past every keep probability's ε clamp
    low, high = -span, span  # sparsity(low) ≥ target ≥ sparsity(high) for any target < 1
    for _ in range(iterations):
        middle = (low + high) / 2
        if sparsity(middle) > target:
            low = middle
        else:
            high = middle
    offset = min((low, high), key=lambda o: abs(sparsity(o) - target))
    return binarise(log_alphas, offset), offset


class HardConcreteMasks(nn.Module):
    """log α for every prunable unit of an L-layer, A-head, H-hidden, I-intermediate BERT."""

    def __init__(self, num_layers: int, num_heads: int, hidden_size: int, intermediate_size: int, droprate_init: float):
        super().__init__()
        self.hidden = nn.Parameter(init_log_alpha((hidden_size,), ALWAYS_ON_LOG_ALPHA))
        self.heads = nn.Parameter(init_log_alpha((num_layers, num_heads), ALWAYS_ON_LOG_ALPHA))
        self.mha = nn.Parameter(init_log_alpha((num_layers,), ALWAYS_ON_LOG_ALPHA))
        self.intermediate = nn.Parameter(
            init_log_alpha((num_layers, intermediate_size), droprate_log_alpha(droprate_init))
        )
        self.ffn = nn.Parameter(init_log_alpha((num_layers,), ALWAYS_ON_LOG_ALPHA))

    def log_alphas(self) -> StructureMasks:
        return StructureMasks(self.hidden, self.heads, self.mha, self.intermediate, self.ffn)

    def sample(self) -> StructureMasks:
        return self.log_alphas().map(sample_hard_concrete)

    def keep_probabilities(self) -> StructureMasks:
        return self.log_alphas().map(keep_probability)

    def deterministic(self) -> StructureMasks:
        """Binary masks for evaluation and export (`binarise` at offset 0)."""
        return binarise(self.log_alphas())

    @torch.no_grad()
    def clamp_(self) -> None:
        for log_alpha in self.parameters():
            log_alpha.clamp_(LOG_ALPHA_MIN, LOG_ALPHA_MAX)


class LagrangeMultipliers(nn.Module):
    """λ1 and λ2, both starting at 0 and trained by gradient ascent.

    One-element vectors, not 0-dim scalars: DeepSpeed's start-up broadcast of the module views
    every parameter as bytes, which a 0-dim float cannot be (`tests/integration/training/
    test_deepspeed_equivalence.py` runs CoFi under DeepSpeed). States saved with 0-dim λ load."""

    def __init__(self):
        super().__init__()
        self.lambda1 = nn.Parameter(torch.zeros(1))
        self.lambda2 = nn.Parameter(torch.zeros(1))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # noqa: ANN001 - torch's hook
        for name in ("lambda1", "lambda2"):
            value = state_dict.get(prefix + name)
            if value is not None and value.dim() == 0:
                state_dict[prefix + name] = value.reshape(1)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
