"""Decoding on a CUDA device: how often ``HFBackend`` makes the host wait for the device.

Skipped where torch sees no GPU (CI has none). Imports only ``lopd.generation``, so it runs on
a bare GPU machine without lopd's other dependencies
(``python3 -m pytest -q tests/test_generation_gpu.py``).
"""

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_decode_reads_back_to_the_host_about_once_per_sync_point():
    """``HFBackend(sync_every=8)`` on a batch whose rows stop at different steps: the host
    waits for the device about once per sync point (the tokens, then the finished rows' masks
    for the prefix cache), not once per row and layer as a boolean index of the KV would."""
    import warnings

    from transformers import LlamaConfig, LlamaForCausalLM

    from lopd.generation import HFBackend, SamplingParams

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2,
                         pad_token_id=0, eos_token_id=0)
    model = LlamaForCausalLM(config).to("cuda").eval()
    stops = set(range(0, 512, 16))  # 1/16 of the ids: rows stop at different steps
    prompts = [torch.randint(1, 512, (n,)).tolist() for n in (30, 45, 60, 75, 90, 105)]
    backend = HFBackend(model, stops, 0, sync_every=8)

    def syncs(tokens: int) -> int:
        params = SamplingParams(max_new_tokens=tokens, temperature=1.0, seed=3)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                outputs = backend.generate(prompts, params)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        return len(caught), outputs

    base, _ = syncs(1)
    total, outputs = syncs(33)
    assert len({len(o) for o in outputs}) > 1  # ragged: rows left at different sync points
    assert backend._entries  # finished rows were stored
    assert (total - base) / 32 <= 1.0, (total, base)
