"""Stand-in for `habana_frameworks.torch.hpex.kernels`: names vllm-gaudi imports; the rotary
embedding has a CPU stand-in, the others raise."""

import enum

import torch


class RotaryPosEmbeddingMode(enum.IntEnum):
    BLOCKWISE = 0
    PAIRWISE = 1


def _absent(name):
    def kernel(*args, **kwargs):
        raise NotImplementedError(f"the Gaudi kernel {name} has no CPU stand-in in the fix lab")

    kernel.__name__ = name
    return kernel


def apply_rotary_pos_emb(p, cos, sin, position_ids=None, offset=0, mode=RotaryPosEmbeddingMode.BLOCKWISE):
    """The Gaudi kernel's contract as vllm-gaudi calls it (position_ids None, offset 0; cos and sin
    already expanded to p's last dimension): BLOCKWISE rotates the two halves (GPT-NeoX), PAIRWISE
    each even/odd pair (GPT-J)."""
    if position_ids is not None or offset:
        raise NotImplementedError("apply_rotary_pos_emb: only position_ids=None, offset=0 stand in on the CPU")
    if mode == RotaryPosEmbeddingMode.BLOCKWISE:
        x1, x2 = p.chunk(2, dim=-1)
        rotated = torch.cat((-x2, x1), dim=-1)
    else:
        rotated = torch.stack((-p[..., 1::2], p[..., 0::2]), dim=-1).flatten(-2)
    return p * cos + rotated * sin
fp8_fused_sdpa = _absent("fp8_fused_sdpa")


class FusedSDPA:
    apply = staticmethod(_absent("FusedSDPA.apply"))
