"""nanoGPT's compiled training loop and checkpoint round trip: `model = torch.compile(model)`, AdamW steps under
bf16 autocast, a checkpoint of the *raw* model's state_dict, and the resume path that strips the "_orig_mod."
prefix a compiled model's state_dict carries (torch.compile returns an OptimizedModule holding the model as
`_orig_mod`). The loss after a reload matches the loss before it, and the compiled model's keys carry the prefix as
on a GPU (simdist once returned the bare module from torch.compile, so the prefix check below failed).

EXPECTED: clean
WORLD_SIZE: 1
MODELLED ON: karpathy/nanoGPT train.py (`model = torch.compile(model)` after `unoptimized_model = model`;
`raw_model = model.module if ddp else model`; checkpoint = {'model': raw_model.state_dict(), ...};
resume: `unwanted_prefix = '_orig_mod.'`, keys with it renamed before `model.load_state_dict(state_dict)`).
RULE: torch/_dynamo/eval_frame.py OptimizedModule registers the module as `_orig_mod` (so its state_dict keys say
"_orig_mod."), forward runs the module; simdist runs the compiled forward eagerly (notes x10).
"""
import io

import torch
import torch.nn as nn


class TinyGPT(nn.Module):
    def __init__(self, vocab=64, d=32, n=8):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(n, d)
        self.ln = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        x = x + self.mlp(self.ln(x))
        logits = self.head(x)
        return nn.functional.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def main():
    torch.cuda.set_device(0)
    torch.manual_seed(1337)
    g = torch.Generator().manual_seed(0)
    data = torch.randint(0, 64, (16, 9), generator=g)
    model = TinyGPT().cuda()
    raw_model = model
    model = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for it in range(4):
        xb = data[it * 4:(it + 1) * 4, :8].pin_memory().cuda(non_blocking=True)
        yb = data[it * 4:(it + 1) * 4, 1:].pin_memory().cuda(non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(xb, yb)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    keys = list(model.state_dict())
    assert keys and all(k.startswith("_orig_mod.") for k in keys), keys[:3]
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, buf)
    buf.seek(0)
    ckpt = torch.load(buf, map_location="cuda")
    state_dict = ckpt["model"]
    unwanted_prefix = "_orig_mod."
    for k in list(state_dict):
        if k.startswith(unwanted_prefix):
            state_dict[k[len(unwanted_prefix):]] = state_dict.pop(k)
    fresh = TinyGPT().cuda()
    fresh.load_state_dict(state_dict)
    xb, yb = data[:4, :8].cuda(), data[:4, 1:].cuda()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        a, b = raw_model(xb, yb).item(), torch.compile(fresh)(xb, yb).item()
    assert a == b, (a, b)
    print(f"loss after 4 compiled steps and a reload: {a:.6f}")


if __name__ == "__main__":
    main()
