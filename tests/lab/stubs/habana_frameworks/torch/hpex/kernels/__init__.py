"""Stand-in for `habana_frameworks.torch.hpex.kernels`: names vllm-gaudi imports, none usable."""

import enum


class RotaryPosEmbeddingMode(enum.IntEnum):
    BLOCKWISE = 0
    PAIRWISE = 1


def _absent(name):
    def kernel(*args, **kwargs):
        raise NotImplementedError(f"the Gaudi kernel {name} has no CPU stand-in in the fix lab")

    kernel.__name__ = name
    return kernel


apply_rotary_pos_emb = _absent("apply_rotary_pos_emb")
fp8_fused_sdpa = _absent("fp8_fused_sdpa")


class FusedSDPA:
    apply = staticmethod(_absent("FusedSDPA.apply"))
