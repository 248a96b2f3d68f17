"""Replaying a dropout mask with torch.cuda.get_rng_state / set_rng_state (what activation recomputation does by
hand, e.g. Megatron's CudaRNGStatesTracker): the replayed forward draws the same mask; the mask is a Bernoulli(1-p)
pattern scaled by 1/(1-p).

EXPECTED: clean
WORLD_SIZE: 1
REASON: torch/cuda/random.py get_rng_state / set_rng_state save and restore the current device's generator (seed and Philox offset); F.dropout scales kept elements by 1/(1-p) (https://pytorch.org/docs/stable/generated/torch.nn.Dropout.html).
"""
import torch
import torch.nn.functional as F


def main():
    torch.cuda.set_device(0)
    torch.cuda.manual_seed(3)
    x = torch.ones(64, 256, device="cuda")
    state = torch.cuda.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    y1 = F.dropout(x, p=0.25, training=True)
    y_other = F.dropout(x, p=0.25, training=True)
    torch.cuda.set_rng_state(state)
    y2 = F.dropout(x, p=0.25, training=True)
    h1, h2, h3 = y1.cpu(), y2.cpu(), y_other.cpu()
    assert torch.equal(h1, h2)
    assert not torch.equal(h1, h3)
    vals = set(h1.unique().tolist())
    assert len(vals) == 2 and 0.0 in vals and abs(max(vals) - 1.0 / 0.75) < 1e-6, vals
    kept = (h1 != 0).float().mean().item()
    assert 0.70 < kept < 0.80, kept
    assert torch.equal(F.dropout(x, p=0.25, training=False).cpu(), x.cpu())


if __name__ == "__main__":
    main()
