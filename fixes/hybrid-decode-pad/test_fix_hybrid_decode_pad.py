"""hybrid-decode-pad: with the hybrid KV cache (Qwen3.5: GDN and attention layers share 896-token
pages), the attention KV tensor holds num_blocks x 7 kernel blocks of 128 tokens plus one dummy kernel
block at index num_blocks x 7. The stock release sets the decode pad block id to num_blocks (in
KV-manager block units) and `_create_decode_input_data` uses it as a kernel block: the padding rows of a
decode batch write their K/V into kernel block num_blocks, a live block of whichever request holds
KV block num_blocks // 7. Patched, they write into the dummy kernel block.

The release's own initialize_kv_cache and _create_decode_input_data run on Qwen3.5-27B's sizes
(cookbook/fixpack/lab/_hybrid.py says what stands in).
"""

from _hybrid import KERNEL_BLOCK, HybridRunner

NUM_BLOCKS = 8  # 896-token KV blocks: 56 kernel blocks, the dummy at 56


def kernel_blocks(slots) -> set[int]:
    return {int(s) // KERNEL_BLOCK for s in slots}


def test_the_decode_padding_rows_write_into_the_dummy_kernel_block(monkeypatch):
    hybrid = HybridRunner(monkeypatch, num_blocks=NUM_BLOCKS, decode_bucket=4)
    dummy = hybrid.key_cache.shape[0] // KERNEL_BLOCK - 1
    assert dummy == NUM_BLOCKS * 7  # the +1 kernel block the release allocates
    hybrid.add_decode("a", gdn_block=3, attn_blocks=[1], context_len=300)  # kernel blocks 7, 8, 9 hold its KV
    hybrid.add_decode("b", gdn_block=4, attn_blocks=[2], context_len=50)   # kernel block 14
    slots = hybrid.decode().attn_metadata.slot_mapping.flatten().tolist()
    assert len(slots) == 4  # two requests padded to the decode bucket of 4 rows
    assert kernel_blocks(slots[:2]) == {9, 14}  # the two real tokens: a at 300, b at 50
    assert kernel_blocks(slots[2:]) == {dummy}


def test_no_padding_slot_lands_in_a_kernel_block_of_a_live_request(monkeypatch):
    hybrid = HybridRunner(monkeypatch, num_blocks=NUM_BLOCKS, decode_bucket=8)
    hybrid.add_decode("a", gdn_block=3, attn_blocks=[1, 5], context_len=1500)  # KV blocks 1 and 5
    hybrid.add_decode("b", gdn_block=4, attn_blocks=[2, 6], context_len=1000)
    hybrid.add_decode("c", gdn_block=7, attn_blocks=[7], context_len=10)
    live = {k for b in (1, 5, 2, 6, 7) for k in range(b * 7, b * 7 + 7)}
    slots = hybrid.decode().attn_metadata.slot_mapping.flatten().tolist()
    assert len(slots) == 8
    assert not kernel_blocks(slots[3:]) & live
    assert hybrid.runner._PAD_SLOT_ID // KERNEL_BLOCK not in live  # the speculative-decode pad (hpu_eagle) too
